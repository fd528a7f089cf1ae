//! Waiting from synchronous code that runs on the broker's async runtime.
//!
//! Request handlers call the replica manager and the coordinators synchronously, and some of
//! those calls wait: for a lock another request holds across a quorum round trip, for the
//! replica-manager thread to apply an image. A runtime worker blocked so holds back every
//! task queued on it (raft RPCs, heartbeats, other connections); with every worker blocked,
//! the node stops answering. So a wait that may be long hands the worker's tasks to another
//! thread first (`block_in_place`).

/// Runs `wait` (something that blocks) so that it does not hold back a runtime worker's
/// other tasks: inside `block_in_place` on a multi-thread runtime's thread, else directly (a
/// plain thread, or a current-thread runtime, where `block_in_place` is not allowed).
pub fn off_worker<T>(wait: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(wait),
        _ => wait(),
    }
}
