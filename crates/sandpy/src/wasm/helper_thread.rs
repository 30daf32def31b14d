//! A named thread fed through a bounded channel: the disposal thread and the thread that
//! makes instances ahead are each one.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;

/// A thread serving what is sent to it; dropping it closes the channel and waits for the
/// thread to finish what it holds.
pub(super) struct HelperThread<T> {
    sender: Option<SyncSender<T>>,
    handle: Option<JoinHandle<()>>,
    name: &'static str,
}

impl<T: Send + 'static> HelperThread<T> {
    /// Start thread `name`, with room for `capacity` items waiting (0: a send succeeds
    /// only while the thread waits for one), serving them with `serve`.
    pub(super) fn start(
        name: &'static str,
        capacity: usize,
        serve: impl FnOnce(Receiver<T>) + Send + 'static,
    ) -> std::io::Result<HelperThread<T>> {
        let (sender, receiver) = sync_channel(capacity);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || serve(receiver))?;
        Ok(HelperThread {
            sender: Some(sender),
            handle: Some(handle),
            name,
        })
    }

    /// Hand `item` over if there is room (or the thread waits), else give it back.
    pub(super) fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        match &self.sender {
            Some(sender) => sender.try_send(item),
            None => Err(TrySendError::Disconnected(item)),
        }
    }
}

impl<T> Drop for HelperThread<T> {
    fn drop(&mut self) {
        drop(self.sender.take());
        if let Some(handle) = self.handle.take() {
            if handle.join().is_err() {
                tracing::warn!("the {} thread panicked", self.name);
            }
        }
    }
}
