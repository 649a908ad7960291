//! What the processor offers beyond plain loads and stores.

/// Asks the processor to bring the cache line of `p` into its caches, without waiting:
/// the misses of a batch's lookups or of a guest's frames requested together, overlapped,
/// instead of paid one after the other when each is read. A hint only: any address will
/// do (nothing is read that the program sees), and where there is no such instruction it
/// does nothing.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and never faults, whatever the
    // address (SSE, which it needs, is part of x86_64).
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    #[test]
    fn a_prefetch_of_any_address_is_harmless() {
        let line = [7u8; 64];
        prefetch(line.as_ptr());
        prefetch(std::ptr::null());
        prefetch(usize::MAX as *const u8);
        assert_eq!(line, [7u8; 64]);
    }
}
