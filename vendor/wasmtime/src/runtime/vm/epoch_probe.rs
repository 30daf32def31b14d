//! sandpy patch: epoch interruption by memory protection (x86-64 Linux).
//!
//! With epoch interruption on, the vendored `wasmtime-internal-cranelift` compiles each
//! epoch check (function entries and loop headers) to one load of the store's *epoch
//! page* whose value is unused (a "probe", trap code `interrupt`), instead of loading the
//! epoch counter, comparing it with the deadline and branching. `Engine::increment_epoch`
//! makes the epoch page of every store in use inaccessible; the next probe of a running
//! store faults, and the signal handler sends the thread to the stub below, which saves
//! every register, calls [`probe_faulted`] (the page is made accessible again and the
//! store's epoch deadline behaviour runs exactly as the `new_epoch` libcall would run it:
//! yield, continue, or trap), restores the registers and resumes at the probe.
//!
//! This is the approach of upstream pull request bytecodealliance/wasmtime#12990
//! ("MMU-based epoch interruption"), reduced to what the existing trap machinery allows:
//! the probe is an atomic load (alias analysis keeps it) carrying a trap code.

use crate::runtime::vm::traphandlers::raise_preexisting_trap;
use crate::runtime::vm::{VMStore, VMStoreRawPtr, host_page_size};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The bookkeeping kept in the page after a store's epoch page (never made inaccessible).
#[repr(C)]
struct Header {
    /// Whether the epoch page is inaccessible now.
    armed: AtomicBool,
    /// The store whose code probes the page.
    store: UnsafeCell<Option<VMStoreRawPtr>>,
}

/// The epoch pages of one engine's stores, reused from store to store.
#[derive(Default)]
pub struct EpochPages {
    pages: Mutex<Pages>,
}

#[derive(Default)]
struct Pages {
    free: Vec<usize>,
    in_use: Vec<usize>,
}

/// A store's epoch page, returned to its engine's pool when the store is dropped.
pub struct EpochPage {
    pool: Arc<EpochPages>,
    addr: usize,
}

fn header(page: usize) -> &'static Header {
    // SAFETY: every page handed out by `EpochPages` is followed by its header page, and
    // pages are never unmapped.
    unsafe { &*((page + host_page_size()) as *const Header) }
}

fn protect(page: usize, accessible: bool) {
    let prot = if accessible {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_NONE
    };
    // SAFETY: `page` is a page of ours, mapped by `EpochPages::acquire`.
    let rc = unsafe { libc::mprotect(page as *mut libc::c_void, host_page_size(), prot) };
    if rc != 0 {
        // Without the protection change epochs would silently stop ending.
        panic!(
            "mprotect of an epoch page failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl EpochPages {
    fn lock(&self) -> MutexGuard<'_, Pages> {
        self.pages.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A page for a new store, accessible.
    pub fn acquire(self: &Arc<Self>) -> EpochPage {
        let mut pages = self.lock();
        let addr = match pages.free.pop() {
            Some(addr) => addr,
            None => {
                let size = 2 * host_page_size();
                // SAFETY: a fresh anonymous mapping.
                let ptr = unsafe {
                    libc::mmap(
                        core::ptr::null_mut(),
                        size,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if ptr == libc::MAP_FAILED {
                    panic!(
                        "cannot map a store's epoch page: {}",
                        std::io::Error::last_os_error()
                    );
                }
                ptr as usize
            }
        };
        disarm_locked(addr);
        pages.in_use.push(addr);
        EpochPage {
            pool: self.clone(),
            addr,
        }
    }

    /// End the epoch for every store in use: make its page inaccessible (once; it stays
    /// so until its store's code probes it).
    pub fn end_epoch(&self) {
        let pages = self.lock();
        for &page in &pages.in_use {
            let header = header(page);
            if !header.armed.load(Ordering::Relaxed) {
                protect(page, false);
                header.armed.store(true, Ordering::Relaxed);
            }
        }
    }

    fn disarm(&self, page: usize) {
        let _pages = self.lock();
        disarm_locked(page);
    }
}

/// Make `page` accessible again if an epoch's end left it inaccessible; the caller holds
/// its pool's lock.
fn disarm_locked(page: usize) {
    let header = header(page);
    if header.armed.load(Ordering::Relaxed) {
        protect(page, true);
        header.armed.store(false, Ordering::Relaxed);
    }
}

impl EpochPage {
    /// The address compiled code probes.
    pub fn probe_ptr(&self) -> NonNull<AtomicU64> {
        NonNull::new(self.addr as *mut AtomicU64).expect("mapped pages are not null")
    }

    /// Record the store whose code probes this page.
    pub fn set_store(&self, store: NonNull<dyn VMStore>) {
        // SAFETY: only the store owning the page writes its header, and only while no
        // code of the store runs.
        unsafe { *header(self.addr).store.get() = Some(VMStoreRawPtr(store)) };
    }
}

impl Drop for EpochPage {
    fn drop(&mut self) {
        let mut pages = self.pool.lock();
        // SAFETY: as in `set_store`; the store is being dropped.
        unsafe { *header(self.addr).store.get() = None };
        if let Some(i) = pages.in_use.iter().position(|&p| p == self.addr) {
            pages.in_use.swap_remove(i);
        }
        pages.free.push(self.addr);
    }
}

/// Called by the stub (`wasmtime_sandpy_epoch_probe_stub`) on the faulting thread, out of
/// the signal handler: `fault` is the probed address, `trampoline_fp` the stub's frame
/// (whose caller is the Wasm frame that probed, as for a libcall's trampoline) and `pc`
/// the probe's address.
unsafe extern "C" fn probe_faulted(fault: usize, trampoline_fp: usize, pc: usize) {
    let page = fault & !(host_page_size() - 1);
    let header = header(page);
    // SAFETY: the header of a page in use names its store, which is running this code.
    let store: &mut dyn VMStore = unsafe {
        let store = (*header.store.get()).as_ref().expect("an epoch page in use has a store");
        &mut *store.0.as_ptr()
    };
    let opaque = store.store_opaque_mut();
    opaque.engine().epoch_pages().disarm(page);
    // As a libcall's trampoline does, so that backtraces and unwinding see the Wasm frames.
    // SAFETY: the store's context outlives its running code.
    unsafe {
        let cx = opaque.vm_store_context_ptr().as_ptr();
        *(*cx).last_wasm_exit_trampoline_fp.get() = trampoline_fp;
        *(*cx).last_wasm_exit_pc.get() = pc;
    }
    // Nothing with a destructor may be alive past here: a trap unwinds over this frame.
    if !crate::runtime::vm::libcalls::epoch_ended(store) {
        // SAFETY: the trap was recorded in the activation's state; this unwinds to the
        // Wasm entry, past the stub's frame.
        unsafe { raise_preexisting_trap(store) };
    }
}

unsafe extern "C" {
    fn wasmtime_sandpy_epoch_probe_stub();
}

// Entered from the signal handler with the probe's address at [rsp], the faulting
// address at [rsp+8] and 128 bytes (the red zone) between those and the interrupted
// rsp. Makes a frame record (so that [rbp] is the Wasm frame's fp and [rbp+8] the
// probe's pc, as for a libcall trampoline), saves flags, every general register and
// xmm0-15, calls `probe_faulted`, restores them and returns to the probe, dropping the
// faulting address and the red zone (`ret 136`).
core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl wasmtime_sandpy_epoch_probe_stub",
    ".hidden wasmtime_sandpy_epoch_probe_stub",
    ".type wasmtime_sandpy_epoch_probe_stub,@function",
    "wasmtime_sandpy_epoch_probe_stub:",
    "push rbp",
    "mov rbp, rsp",
    "pushfq",
    "push rax",
    "push rcx",
    "push rdx",
    "push rbx",
    "push rsi",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "sub rsp, 256",
    "and rsp, -16",
    "movdqu [rsp + 0], xmm0",
    "movdqu [rsp + 16], xmm1",
    "movdqu [rsp + 32], xmm2",
    "movdqu [rsp + 48], xmm3",
    "movdqu [rsp + 64], xmm4",
    "movdqu [rsp + 80], xmm5",
    "movdqu [rsp + 96], xmm6",
    "movdqu [rsp + 112], xmm7",
    "movdqu [rsp + 128], xmm8",
    "movdqu [rsp + 144], xmm9",
    "movdqu [rsp + 160], xmm10",
    "movdqu [rsp + 176], xmm11",
    "movdqu [rsp + 192], xmm12",
    "movdqu [rsp + 208], xmm13",
    "movdqu [rsp + 224], xmm14",
    "movdqu [rsp + 240], xmm15",
    "cld",
    "mov rdi, [rbp + 16]",
    "mov rsi, rbp",
    "mov rdx, [rbp + 8]",
    "call {probe_faulted}",
    "movdqu xmm0, [rsp + 0]",
    "movdqu xmm1, [rsp + 16]",
    "movdqu xmm2, [rsp + 32]",
    "movdqu xmm3, [rsp + 48]",
    "movdqu xmm4, [rsp + 64]",
    "movdqu xmm5, [rsp + 80]",
    "movdqu xmm6, [rsp + 96]",
    "movdqu xmm7, [rsp + 112]",
    "movdqu xmm8, [rsp + 128]",
    "movdqu xmm9, [rsp + 144]",
    "movdqu xmm10, [rsp + 160]",
    "movdqu xmm11, [rsp + 176]",
    "movdqu xmm12, [rsp + 192]",
    "movdqu xmm13, [rsp + 208]",
    "movdqu xmm14, [rsp + 224]",
    "movdqu xmm15, [rsp + 240]",
    "lea rsp, [rbp - 120]",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rsi",
    "pop rbx",
    "pop rdx",
    "pop rcx",
    "pop rax",
    "popfq",
    "pop rbp",
    "ret 136",
    ".size wasmtime_sandpy_epoch_probe_stub, .-wasmtime_sandpy_epoch_probe_stub",
    probe_faulted = sym probe_faulted,
);

/// In the signal handler, for a fault of a probe at `pc` on `fault`: make the interrupted
/// thread continue in the stub, which returns to the probe.
///
/// # Safety
///
/// `cx` is the `ucontext_t` of a SIGSEGV raised by a probe in Wasm code.
pub unsafe fn redirect_to_stub(cx: *mut libc::c_void, fault: usize) {
    // SAFETY: per this function's contract.
    unsafe {
        let cx = &mut *cx.cast::<libc::ucontext_t>();
        let gregs = &mut cx.uc_mcontext.gregs;
        let pc = gregs[libc::REG_RIP as usize] as usize;
        let sp = gregs[libc::REG_RSP as usize] as usize - 128 - 16;
        *(sp as *mut usize) = pc;
        *((sp + 8) as *mut usize) = fault;
        gregs[libc::REG_RSP as usize] = sp as i64;
        gregs[libc::REG_RIP as usize] = wasmtime_sandpy_epoch_probe_stub as *const () as usize as i64;
    }
}
