//! Which addresses sandboxed code may not reach through a host name: the machine itself,
//! its private networks and the cloud metadata service. A name that resolves only to such
//! addresses is refused (DNS rebinding to 127.0.0.1, an internal name), unless an entry of
//! the allowlist names the address itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is loopback, private, link-local (the metadata address 169.254.169.254
/// among them), shared (CGNAT), unspecified, multicast, broadcast or reserved; IPv6
/// addresses that embed an IPv4 address (mapped, NAT64) are judged by it.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || a >= 240
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let segments = ip.segments();
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64: the IPv4 address in the last 32 bits.
        let [.., c, d] = segments;
        let v4 = Ipv4Addr::new((c >> 8) as u8, c as u8, (d >> 8) as u8, d as u8);
        return is_internal_v4(v4);
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local (fd00:ec2::254, the metadata)
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated, still routed by some)
        || segments[..2] == [0x2001, 0xdb8] // documentation
        || segments[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible (deprecated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_told_from_public_ones() {
        for internal in [
            "127.0.0.1",
            "127.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::7f00:1",
            "fd00:ec2::254",
            "fe80::1",
            "::127.0.0.1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "1.1.1.1",
            "140.82.112.3",
            "2606:4700::1111",
            "64:ff9b::101:101",
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
