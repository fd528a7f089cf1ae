//! The global allocator: the system allocator, except that very large blocks are reserved with
//! `mmap(MAP_NORESERVE)`.
//!
//! Why: kafka-protocol's decoder sizes a Vec from the element count an array claims on the wire
//! before it reads the elements (`Vec::with_capacity(n)`, and `IndexMap::with_capacity` for
//! record headers). A 17-byte frame claiming 2^31 topics asks for ~150 GB; the system allocator
//! refuses, and Rust aborts the process on allocation failure: one malformed request would kill
//! the broker. Reserved without backing, such a block costs no memory: the decoder fails on the
//! next missing element, the Vec is dropped and the mapping released, and the connection gets
//! its reasoned close. Legitimate blocks this large are rare (a request is at most
//! `socket.request.max.bytes`), and they behave as usual: pages are backed when touched.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks from this size up are mapped directly.
const MAPPED_BYTES_MIN: usize = 256 * 1024 * 1024;
const PAGE_BYTES: usize = 4096;

pub struct Allocator;

fn mapped(layout: &Layout) -> bool {
    layout.size() >= MAPPED_BYTES_MIN && layout.align() <= PAGE_BYTES
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping; the kernel picks the address.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        ptr.cast()
    }
}

// SAFETY: every block is released by the same mechanism that created it, chosen by its layout,
// which the caller passes back unchanged; mapped blocks are page-aligned and zero-filled.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(&layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Anonymous mappings are zero-filled already.
        if mapped(&layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(&layout) {
            // SAFETY: `ptr` came from `map` with this size.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        if !mapped(&layout) && !mapped(&new_layout) {
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Crossing the threshold (or resizing a mapped block): move the contents.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_claimed_count_far_beyond_memory_does_not_abort() {
        // 2^31 elements of 96 bytes: about 200 GB, never touched.
        let v: Vec<[u64; 12]> = Vec::with_capacity(i32::MAX as usize);
        assert!(v.capacity() >= i32::MAX as usize);
        drop(v);
        // Growing across the threshold keeps the contents.
        let mut w: Vec<u8> = vec![7; 1024];
        w.reserve(super::MAPPED_BYTES_MIN);
        assert!(w.iter().all(|b| *b == 7));
    }
}
