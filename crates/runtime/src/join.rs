use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Handle to a spawned task. Awaiting it yields the task's output; dropping it lets the task
/// run on (unlike `async_task::Task`, which cancels on drop), because engine background work
/// must not vanish when the code that started it stops caring.
pub struct JoinHandle<T> {
    task: Option<async_task::Task<T, crate::ReactorId>>,
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(task: async_task::Task<T, crate::ReactorId>) -> Self {
        Self { task: Some(task) }
    }

    /// Stops the task at its next suspension point.
    pub fn cancel(mut self) {
        if let Some(t) = self.task.take() {
            drop(t);
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.detach();
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let task = self.task.as_mut().expect("JoinHandle polled after completion");
        Pin::new(task).poll(cx)
    }
}
