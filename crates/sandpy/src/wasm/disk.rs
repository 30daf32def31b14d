//! The guest's filesystem calls that can grow a folder or open a file, shadowed so that the
//! host enforces disk quotas (`quota.rs`) and an open-file cap on its writable folders.
//!
//! wasmtime-wasi writes files straight to the host disk with no size limit, so sandpy
//! shadows the few `wasi:filesystem` functions that can grow what a folder holds (write,
//! write streams, set-size, creating entries) with versions that charge the growth to
//! the folder's quota first and refuse what does not fit: positioned writes and
//! truncation fail with `insufficient-space` (Python: `OSError` `ENOSPC`); ordinary
//! writes go through a stream, whose failures the guest's libc reports as `EIO` whatever
//! the cause. Either way the run's status says which quota was hit
//! (`disk_limit`). `open-at` is shadowed too, to cap the host file descriptors a run
//! holds, and `rename-at`/`link-at`, to keep files from moving between quotas.
//!
//! The quotas themselves are in `quota.rs`.

use super::host::HostState;
use super::quota::{Area, DiskLimit, ENTRY_BYTES, MAX_OPEN_DESCRIPTORS};
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use wasmtime::component::{Linker, Resource};
use wasmtime::StoreContextMut;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, Filesize, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{
    DynOutputStream, FsResult, OutputStream, Pollable, StreamError, StreamResult,
};

/// The `wasi:filesystem` version wasmtime-wasi 48 defines (guests importing any 0.2.x
/// version link to it).
const TYPES: &str = "wasi:filesystem/types@0.2.12";
const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";

const ENOSPC: i32 = 28;

/// The guest-visible result of a wasmtime-wasi call: its error code, or a trap.
fn answer<T>(result: FsResult<T>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

/// Charge the growth of the file behind `fd` (if it is a file) to `end` bytes.
fn charge_to_end(
    state: &mut HostState,
    fd: &Resource<Descriptor>,
    end: u64,
) -> Result<(), ErrorCode> {
    match file_of(state, fd) {
        Some(file) => state
            .disk
            .charge(fd.rep(), end.saturating_sub(file_len(&file))),
        None => Ok(()),
    }
}

/// The open file behind `fd`, if it is one.
fn file_of(state: &mut HostState, fd: &Resource<Descriptor>) -> Option<Arc<std::fs::File>> {
    match state.table.get(fd).ok()? {
        Descriptor::File(f) => Some(f.file.clone()),
        Descriptor::Dir(_) => None,
    }
}

fn file_len(file: &std::fs::File) -> u64 {
    file.metadata().map(|m| m.len()).unwrap_or(0)
}

/// Replace wasmtime-wasi's growing filesystem functions with quota-checked ones.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut preopens = linker.instance(PREOPENS)?;
    preopens.func_wrap(
        "get-directories",
        |mut store: StoreContextMut<'_, HostState>, (): ()| {
            let state = store.data_mut();
            let dirs = wasmtime_wasi::p2::bindings::filesystem::preopens::Host::get_directories(
                &mut state.filesystem(),
            )?;
            for (fd, guest) in &dirs {
                if let Some(area) = state.disk.areas.iter().find(|a| &a.guest == guest) {
                    state.disk.descriptors.insert(fd.rep(), area.clone());
                }
            }
            Ok((dirs,))
        },
    )?;

    let mut types = linker.instance(TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                let parent = fd.rep();
                let table = &state.table;
                state.disk.descriptors.retain(|rep, _| {
                    *rep == parent || table.get(&Resource::<Descriptor>::new_borrow(*rep)).is_ok()
                });
                if state.disk.descriptors.len() >= MAX_OPEN_DESCRIPTORS {
                    state.disk.note(&DiskLimit::OpenFiles);
                    return Ok((Err(DiskLimit::OpenFiles.code()),));
                }
                if oflags.contains(OpenFlags::CREATE) {
                    if let Err(code) = state.disk.charge(parent, ENTRY_BYTES) {
                        return Ok((Err(code),));
                    }
                }
                let area = state.disk.area(parent).ok();
                let opened = HostDescriptor::open_at(
                    &mut state.filesystem(),
                    fd,
                    path_flags,
                    path,
                    oflags,
                    flags,
                )
                .await;
                let opened = answer(opened)?;
                if let (Ok(new), Some(area)) = (&opened, area) {
                    state.disk.descriptors.insert(new.rep(), area);
                }
                Ok((opened,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, Filesize)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) =
                    charge_to_end(state, &fd, offset.saturating_add(buf.len() as u64))
                {
                    return Ok((Err(code),));
                }
                Ok((answer(
                    HostDescriptor::write(&mut state.filesystem(), fd, buf, offset).await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, size): (Resource<Descriptor>, Filesize)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = charge_to_end(state, &fd, size) {
                    return Ok((Err(code),));
                }
                Ok((answer(
                    HostDescriptor::set_size(&mut state.filesystem(), fd, size).await,
                )?,))
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, offset): (Resource<Descriptor>, Filesize)| {
            let state = store.data_mut();
            let stream = HostDescriptor::write_via_stream(
                &mut state.filesystem(),
                Resource::new_borrow(fd.rep()),
                offset,
            );
            Ok((metered(state, &fd, answer(stream)?, Some(offset))?,))
        },
    )?;
    types.func_wrap(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, HostState>, (fd,): (Resource<Descriptor>,)| {
            let state = store.data_mut();
            let stream = HostDescriptor::append_via_stream(
                &mut state.filesystem(),
                Resource::new_borrow(fd.rep()),
            );
            Ok((metered(state, &fd, answer(stream)?, None)?,))
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: StoreContextMut<'_, HostState>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state.disk.charge(fd.rep(), ENTRY_BYTES) {
                    return Ok((Err(code),));
                }
                Ok((answer(
                    HostDescriptor::create_directory_at(&mut state.filesystem(), fd, path).await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, target, path): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state.disk.charge(fd.rep(), ENTRY_BYTES) {
                    return Ok((Err(code),));
                }
                Ok((answer(
                    HostDescriptor::symlink_at(&mut state.filesystem(), fd, target, path).await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if !state.disk.same_area(fd.rep(), new_fd.rep()) {
                    return Ok((Err(ErrorCode::CrossDevice),));
                }
                if let Err(code) = state.disk.charge(new_fd.rep(), ENTRY_BYTES) {
                    return Ok((Err(code),));
                }
                Ok((answer(
                    HostDescriptor::link_at(&mut state.filesystem(), fd, flags, old, new_fd, new)
                        .await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: StoreContextMut<'_, HostState>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if !state.disk.same_area(fd.rep(), new_fd.rep()) {
                    return Ok((Err(ErrorCode::CrossDevice),));
                }
                Ok((answer(HostDescriptor::rename_at(&mut state.filesystem(), fd, old, new_fd, new).await)?,))
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Wrap a fresh write stream of `fd` so that its writes are charged to `fd`'s area.
fn metered(
    state: &mut HostState,
    fd: &Resource<Descriptor>,
    stream: Result<Resource<DynOutputStream>, ErrorCode>,
    offset: Option<u64>,
) -> wasmtime::Result<Result<Resource<DynOutputStream>, ErrorCode>> {
    let stream = match stream {
        Ok(stream) => stream,
        Err(code) => return Ok(Err(code)),
    };
    let (Some(file), Ok(area)) = (file_of(state, fd), state.disk.area(fd.rep())) else {
        // A file outside every known folder: never written unmetered.
        state.table.delete(stream)?;
        return Ok(Err(ErrorCode::NotPermitted));
    };
    let inner = state.table.delete(stream)?;
    let metered = MeteredStream {
        inner,
        file,
        position: offset,
        high_water: 0,
        area,
        refusal: state.disk.refusal.clone(),
    };
    Ok(Ok(state.table.push(Box::new(metered) as DynOutputStream)?))
}

/// A file's write stream whose every write is charged to its area's quota first.
struct MeteredStream {
    inner: DynOutputStream,
    file: Arc<std::fs::File>,
    /// Where the next write lands; `None` for an append stream.
    position: Option<u64>,
    /// The end of this stream's furthest write (the file may not show it yet: wasmtime
    /// writes in the background).
    high_water: u64,
    area: Arc<Area>,
    refusal: Arc<Mutex<Option<DiskLimit>>>,
}

impl MeteredStream {
    fn admit(&mut self, len: usize) -> StreamResult<()> {
        let size = file_len(&self.file).max(self.high_water);
        let start = self.position.unwrap_or(size);
        let end = start.saturating_add(len as u64);
        if let Err(refusal) = self.area.charge(end.saturating_sub(size)) {
            self.refusal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(refusal);
            let error = std::io::Error::from_raw_os_error(ENOSPC);
            return Err(StreamError::LastOperationFailed(error.into()));
        }
        self.high_water = self.high_water.max(end);
        if let Some(position) = &mut self.position {
            *position = end;
        }
        Ok(())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for MeteredStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for MeteredStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.admit(bytes.len())?;
        self.inner.write(bytes)
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.admit(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn write_zeroes(&mut self, len: usize) -> StreamResult<()> {
        self.admit(len)?;
        self.inner.write_zeroes(len)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
