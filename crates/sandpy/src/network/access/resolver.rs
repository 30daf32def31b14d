//! Names resolved on the host, internal addresses kept from the code: the resolver a
//! client is built with, and what a failed exchange tells the code (a rejected
//! certificate, a name that resolved only to internal addresses).

use super::FetchError;
use crate::network::address::is_internal;
use crate::network::allow::{AllowRule, Destination, Host};
use std::net::{IpAddr, SocketAddr};

/// What went wrong: a rejected certificate says why and what to do; a name that resolved
/// only to internal addresses is a refusal that names the list that refused it.
pub(super) fn failure(
    error: &reqwest::Error,
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> FetchError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut last = error.to_string();
    while let Some(current) = cause {
        if let Some(rustls::Error::InvalidCertificate(reason)) = current.downcast_ref() {
            return FetchError::Failed(format!(
                "the TLS certificate of {} was rejected: {}",
                error.url().map_or("the server".into(), |u| u
                    .host_str()
                    .unwrap_or("")
                    .to_string()),
                crate::tls::certificate_problem(
                    reason,
                    None,
                    "`sandpy.network.ca_file`",
                    "the URL"
                )
            ));
        }
        if let Some(refused) = current.downcast_ref::<InternalAddress>() {
            return FetchError::Refused(refused.explain(allow, narrowed, to));
        }
        last = current.to_string();
        // An `io::Error`'s `source` skips the error it wraps (rustls's, in a handshake).
        cause = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
    }
    FetchError::Failed(if error.is_connect() {
        format!("cannot connect: {last}")
    } else {
        last
    })
}

/// A name resolved only to addresses code may not reach.
#[derive(Debug)]
struct InternalAddress {
    host: String,
    refused: Vec<IpAddr>,
}

impl InternalAddress {
    /// The refusal as the code reads it: that the name resolved to internal addresses
    /// only, and which list refused them.
    fn explain(
        &self,
        allow: &[AllowRule],
        narrowed: Option<&[AllowRule]>,
        to: &Destination<'_>,
    ) -> String {
        let by_operator = self.refused.iter().any(|ip| {
            let by_address = Destination {
                host: Host::Ip(*ip),
                ..*to
            };
            allow.iter().any(|r| r.allows(&by_address))
        });
        let by = if by_operator && narrowed.is_some() {
            "the policy's `network_allow`"
        } else {
            "sandpy.network.allow"
        };
        format!("{} {to}: {self}; refused by {by}", to.method)
    }
}

impl std::fmt::Display for InternalAddress {
    /// Never the addresses themselves: under `*` the code could map the internal network's
    /// names to its addresses.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.refused.is_empty() {
            return write!(f, "{} resolves to no address", self.host);
        }
        write!(
            f,
            "{} resolves to internal addresses only (loopback, private, link-local, \
             metadata), which are reached only when an allowlist entry names the address \
             (and allows this port, method and path)",
            self.host,
        )
    }
}

impl std::error::Error for InternalAddress {}

/// Resolves names on the host and keeps only the addresses code may reach: public ones,
/// and the internal ones of `reachable`. A client (and so its kept connections) serves
/// only requests whose own reachable addresses are these (`Network::client`).
pub(in crate::network) struct CheckedResolver {
    reachable: Vec<IpAddr>,
}

impl CheckedResolver {
    pub(in crate::network) fn new(reachable: Vec<IpAddr>) -> std::sync::Arc<CheckedResolver> {
        std::sync::Arc::new(CheckedResolver { reachable })
    }
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reachable = self.reachable.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                found.into_iter().partition(|a| {
                    let ip = a.ip();
                    !is_internal(ip)
                        || reachable
                            .iter()
                            .any(|r| r.to_canonical() == ip.to_canonical())
                });
            if kept.is_empty() {
                let refused = refused.iter().map(|a| a.ip()).collect();
                return Err(Box::new(InternalAddress { host, refused }) as _);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}
