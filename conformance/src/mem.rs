//! Memory and the system: freed memory handed back between the judge's chunks of cases, so
//! that the process's peak is the largest chunk's working set rather than the sum of what the
//! allocator keeps of every chunk (glibc keeps freed pages in each thread's arena); large
//! arrays on huge pages ([`zeroed_vec`]).

/// Hands the allocator's free pages back to the system (glibc's `malloc_trim`; nothing
/// elsewhere). Frees nothing in use: only the resident size changes.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only returns free pages of the heap to the kernel; it is
        // thread-safe (it locks each arena) and takes no pointers.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// `n` zeroed values in memory backed by transparent huge pages where the system offers them
/// on request (Linux `madvise(MADV_HUGEPAGE)` on the vector's whole 2 MiB pages, before any is
/// touched), as numpy does for its large arrays: a 25 MB array then costs a dozen page faults
/// instead of six thousand. The same vector either way; only the faults differ.
pub fn zeroed_vec<T: bytemuck::Zeroable + Clone>(n: usize) -> Vec<T> {
    let v = vec![T::zeroed(); n];
    advise_huge_pages(
        n.saturating_mul(std::mem::size_of::<T>()),
        v.as_ptr() as usize,
    );
    v
}

/// An empty vector with room for `n` values, that room advised as [`zeroed_vec`]'s (for a
/// vector filled by pushing).
pub fn vec_with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise_huge_pages(
        v.capacity().saturating_mul(std::mem::size_of::<T>()),
        v.as_ptr() as usize,
    );
    v
}

/// `madvise(MADV_HUGEPAGE)` on the 2 MiB pages wholly inside `[addr, addr + len)`, for
/// regions of at least 4 MiB (nothing elsewhere, or if the system refuses).
fn advise_huge_pages(len: usize, addr: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if len < 2 * HUGE {
            return;
        }
        let start = addr.next_multiple_of(HUGE);
        let end = (addr + len) / HUGE * HUGE;
        if end <= start {
            return;
        }
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        // SAFETY: the range lies inside one live allocation of ours (the vector's buffer) and
        // is page-aligned; MADV_HUGEPAGE changes only how its pages are backed, never their
        // contents. A refusal (THP off, an old kernel) is harmless.
        unsafe {
            madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
        }
    }
}

#[cfg(test)]
mod tests {
    /// `zeroed_vec` is `vec![0; n]` below, at and above the huge-page threshold (the advice
    /// changes no value and no length).
    #[test]
    fn zeroed_vec_is_zeros() {
        for n in [0usize, 1, 1 << 20, (1 << 20) + 3, 3 << 20] {
            let v = super::zeroed_vec::<f32>(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&e| e.to_bits() == 0), "{n}");
            let w = super::zeroed_vec::<f64>(n);
            assert_eq!(w.len(), n);
            assert!(w.iter().all(|&e| e.to_bits() == 0), "{n}");
        }
    }
}
