//! The kernel's taint mask (`/proc/sys/kernel/tainted`) in words.
//!
//! The bits and letters are `taint_flags` in kernel/panic.c (the `TAINT_*` numbers in
//! include/linux/panic.h; Documentation/admin-guide/tainted-kernels.rst). Bit 18 (`N`, TEST)
//! came in 5.19, bit 19 (`J`, FWCTL) in 6.15; a bit past the table is named by its number.

/// (letter, `TAINT_*` name, what it means) for bits 0, 1, ...
const FLAGS: [(char, &str, &str); 20] = [
    ('P', "PROPRIETARY_MODULE", "a proprietary module was loaded"),
    ('F', "FORCED_MODULE", "a module was force-loaded"),
    ('S', "CPU_OUT_OF_SPEC", "the CPU is out of spec"),
    ('R', "FORCED_RMMOD", "a module was force-unloaded"),
    ('M', "MACHINE_CHECK", "a machine check exception occurred"),
    ('B', "BAD_PAGE", "a bad page was referenced"),
    ('U', "USER", "user space asked for the taint"),
    ('D', "DIE", "the kernel died (an oops or BUG)"),
    ('A', "OVERRIDDEN_ACPI_TABLE", "an ACPI table was overridden"),
    ('W', "WARN", "the kernel issued a warning"),
    ('C', "CRAP", "a staging driver was loaded"),
    (
        'I',
        "FIRMWARE_WORKAROUND",
        "a firmware bug workaround is on",
    ),
    ('O', "OOT_MODULE", "an out-of-tree module was loaded"),
    ('E', "UNSIGNED_MODULE", "an unsigned module was loaded"),
    ('L', "SOFTLOCKUP", "a soft lockup occurred"),
    ('K', "LIVEPATCH", "the kernel was live-patched"),
    ('X', "AUX", "an auxiliary taint (distribution-defined)"),
    ('T', "RANDSTRUCT", "built with the randstruct plugin"),
    ('N', "TEST", "an in-kernel test ran"),
    ('J', "FWCTL", "fwctl was used to change the device"),
];

/// `TAINT_DIE`, `TAINT_WARN` and `TAINT_SOFTLOCKUP` as mask bits.
pub const DIE: u64 = 1 << 7;
pub const WARN: u64 = 1 << 9;
pub const SOFTLOCKUP: u64 = 1 << 14;

/// Reads `/proc/sys/kernel/tainted`'s text (a decimal mask).
pub fn parse(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The bits set in `after` but not in `before`.
pub fn added(before: u64, after: u64) -> u64 {
    after & !before
}

/// "W (WARN: the kernel issued a warning), E (...)": each set bit of `mask` in words.
pub fn describe(mask: u64) -> String {
    (0..64)
        .filter(|bit| mask & (1 << bit) != 0)
        .map(|bit| match FLAGS.get(bit) {
            Some((letter, name, what)) => format!("{letter} (TAINT_{name}: {what})"),
            None => format!("bit {bit} (unknown to bpfvm)"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_warn_bit_is_named() {
        // Boot left E (unsigned module, 8192); the test added W (512).
        let new = added(8192, 8192 | 512);
        assert_eq!(new, 512);
        assert_eq!(describe(new), "W (TAINT_WARN: the kernel issued a warning)");
        assert_eq!(added(8704, 8704), 0);
    }

    #[test]
    fn every_bit_reads_in_words() {
        assert_eq!(
            describe(1 | (1 << 7)),
            "P (TAINT_PROPRIETARY_MODULE: a proprietary module was loaded), \
             D (TAINT_DIE: the kernel died (an oops or BUG))"
        );
        assert_eq!(describe(1 << 40), "bit 40 (unknown to bpfvm)");
        assert_eq!(parse("512\n"), Some(512));
        assert_eq!(parse("x"), None);
    }
}
