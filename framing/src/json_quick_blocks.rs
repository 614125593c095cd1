//! A skipped string scanned 64 bytes a step, whatever its escapes.
//!
//! A client's prompt has an escape (a newline, a quote) every few dozen
//! bytes. Found run by run, each escape costs a mispredicted branch and a
//! restart of the scan: ~5 instructions a byte of k6's prose prompt, most
//! of the Edge's routing of a long request. Here each block of 64 bytes is
//! read as three bit masks (its quotes, backslashes and control bytes, by
//! `wide`: SSE2 on x86-64, NEON on aarch64, plain code elsewhere), and the
//! bytes its escapes cover are found from the masks with two additions:
//!
//! - A byte is escaped when the run of backslashes before it is odd. Runs
//!   are told apart by where they start: adding a run's first bit to the
//!   backslash mask carries through the run and lands on the byte after
//!   it. The run's length is odd exactly when that byte's position and the
//!   run's start differ in parity, so runs starting on even bits and runs
//!   starting on odd bits are added separately and each kept on the
//!   other parity.
//! - A run that reaches the block's last byte carries out of the addition;
//!   when it started on an odd bit its length is odd, so the next block's
//!   first byte is escaped (the carry into that block).
//!
//! The string ends at the first quote not escaped. Before it, a control
//! byte declines the string, and each escape's letter is checked as the
//! byte-wise scan checks it ([`escape_len`]: one of `"\/bfnrt`, or `u` and
//! four hex digits that are not a surrogate, or a surrogate pair's two
//! `\u` escapes, whose second is then not checked on its own), one step an
//! escape with no scan between them. Fewer than 64 bytes left (a short
//! document's end), the caller scans on byte-wise from where the blocks
//! stopped (a pair whose second half lies there is then declined: rare,
//! and serde reads it).

use wide::u8x64;

use super::escapes::{PAIR_LEN, escape_len};

/// Bytes a step.
pub(super) const BLOCK: usize = 64;

/// Bits at the even positions of a block.
const EVEN: u64 = 0x5555_5555_5555_5555;

/// How far [`skip`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scan {
    /// The string's closing quote is at this index.
    End(usize),
    /// Fewer than a block's bytes were left: scan on byte-wise from this
    /// index, which is never inside an escape (it is the backslash when
    /// one began just before).
    Rest(usize),
}

/// Skips the string whose body `bytes` begins (the bytes after its opening
/// quote, to the document's end). `None` declines it: a control byte or an
/// escape that [`escape_len`] does not take.
#[inline]
pub(super) fn skip(bytes: &[u8]) -> Option<Scan> {
    let mut at = 0;
    // 1 when the block's first byte is escaped by the last one before it.
    let mut carry = 0u64;
    // The letter of a low surrogate's `\u` that a pair checked before it
    // covers (it is not an escape of its own).
    let mut paired_low = usize::MAX;
    while let Some(block) = bytes.get(at..at + BLOCK).and_then(|b| b.try_into().ok()) {
        let masks = Masks::of(block);
        let (escaped, carry_out) = escaped(masks.backslashes, carry);
        let quotes = masks.quotes & !escaped;
        // The lowest quote's bit (none: 0), and the bits below it (all
        // when there is none).
        let end = quotes & quotes.wrapping_neg();
        let before = end.wrapping_sub(1);
        if masks.controls & before != 0 {
            return None;
        }
        // `\"`, `\\` and `\n` (nearly every escape of a prompt) are taken
        // by their masks, and so are `\u` escapes of a character that is
        // not a surrogate when the block holds their digits and
        // [`MANY_ESCAPES`] or more are left; the rest one at a time.
        let escapes = escaped & before & !(masks.quotes | masks.backslashes | masks.ns);
        if escapes != 0 {
            check_letters(bytes, at, block, escapes, &mut paired_low)?;
        }
        if end != 0 {
            return Some(Scan::End(at + end.trailing_zeros() as usize));
        }
        carry = carry_out;
        at += BLOCK;
    }
    if paired_low != usize::MAX && paired_low >= at {
        // A pair whose second half was not reached: back to the first
        // half's backslash, for the byte-wise scan to take it whole.
        return Some(Scan::Rest(paired_low - PAIR_LEN / 2 - 1));
    }
    // Back to the backslash of an escape the last block began.
    Some(Scan::Rest(at - carry as usize))
}

/// Checks the escapes whose letters `letters` are (bits of `block`, which
/// begins at `base` in `bytes`; `\"`, `\\` and `\n` are not among them,
/// their masks took them): `\u` escapes by their masks when there are
/// [`MANY_ESCAPES`] or more, the rest one at a time by [`escape_len`];
/// `paired_low` is the letter of a low surrogate's `\u` that a pair checked
/// before it covers. For a string's blocks here and a container's
/// (`json_quick_walk.rs`).
#[cold]
pub(super) fn check_letters(
    bytes: &[u8],
    base: usize,
    block: &[u8; BLOCK],
    mut letters: u64,
    paired_low: &mut usize,
) -> Option<()> {
    if letters.count_ones() >= MANY_ESCAPES {
        letters &= !unicode_escapes(block, letters);
    }
    while letters != 0 {
        let letter = base + letters.trailing_zeros() as usize;
        if letter != *paired_low && escape_len(bytes.get(letter..)?)? == PAIR_LEN {
            *paired_low = letter + PAIR_LEN / 2;
        }
        letters &= letters - 1;
    }
    Some(())
}

/// Escapes left in a block from which their `\u` escapes are found by
/// masks ([`unicode_escapes`]) rather than one at a time. Text written all
/// in escapes (a Japanese prompt from Python's `json.dumps`) has ten in a
/// block; an emoji's pair now and then (two, each half a surrogate, which
/// the masks leave to the one-at-a-time check) had cost 16 % more with the
/// masks taken from three (`hack/instructions.sh`).
const MANY_ESCAPES: u32 = 5;

/// Of the escaped letters `letters` of `block`, those that begin a `\u`
/// escape whose four hex digits lie in the block and are not a
/// surrogate's: what [`escape_len`] would take as 6 bytes, found for the
/// whole block by masks. Text a client wrote wholly in `\u` escapes (every
/// character past ASCII, as Python's `json.dumps` writes by default: a
/// Japanese prompt) has ten in a block, at ~60 instructions each one at a
/// time.
#[inline]
fn unicode_escapes(block: &[u8; BLOCK], letters: u64) -> u64 {
    let v = u8x64::new(*block);
    let us = v.simd_eq(u8x64::splat(b'u')).to_bitmask() & letters;
    if us == 0 {
        return 0;
    }
    let within = |v: u8x64, low: u8, high: u8| {
        v.max(u8x64::splat(low)).simd_eq(v) & v.min(u8x64::splat(high)).simd_eq(v)
    };
    // A letter's case bit set: `A`–`F` read as `a`–`f`, `D` as `d`.
    let lower = v | u8x64::splat(0x20);
    let letter = within(lower, b'a', b'f');
    let hex = (within(v, b'0', b'9') | letter).to_bitmask();
    // A surrogate's first two digits: `d`, then `8`–`f`.
    let d = lower.simd_eq(u8x64::splat(b'd')).to_bitmask();
    let high = (within(v, b'8', b'9') | letter).to_bitmask();
    // Bit i: the four bytes after byte i are hex digits (none past the
    // block: a shift brings in zeros), not `d` and `8`–`f`.
    let digits = (hex >> 1) & (hex >> 2) & (hex >> 3) & (hex >> 4);
    us & digits & !((d >> 1) & (high >> 2))
}

/// The bytes of a block its backslashes escape (the byte after each odd
/// run; a run's inner backslashes are left out, they are escaped
/// backslashes), and whether the next block's first byte is escaped.
/// `carry`: whether this block's first byte is.
#[inline(always)]
pub(super) fn escaped(backslashes: u64, carry: u64) -> (u64, u64) {
    // An escaped backslash begins nothing.
    let backslashes = backslashes & !carry;
    let starts = backslashes & !(backslashes << 1);
    let after_even_starts = backslashes.wrapping_add(starts & EVEN) & !backslashes;
    let (odd_sum, carry_out) = backslashes.overflowing_add(starts & !EVEN);
    let after_odd_starts = odd_sum & !backslashes;
    let escaped = (after_even_starts & !EVEN) | (after_odd_starts & EVEN) | carry;
    (escaped, u64::from(carry_out))
}

/// A block's bytes of each kind a string cares about, bit `i` for byte `i`.
#[derive(Debug, PartialEq, Eq)]
struct Masks {
    quotes: u64,
    backslashes: u64,
    /// Below 0x20.
    controls: u64,
    /// `n`, the letter of the commonest escape.
    ns: u64,
}

impl Masks {
    /// The masks of `block`.
    #[inline(always)]
    fn of(block: &[u8; BLOCK]) -> Self {
        let v = u8x64::new(*block);
        Self {
            quotes: v.simd_eq(u8x64::splat(b'"')).to_bitmask(),
            backslashes: v.simd_eq(u8x64::splat(b'\\')).to_bitmask(),
            controls: v.min(u8x64::splat(0x1f)).simd_eq(v).to_bitmask(),
            ns: v.simd_eq(u8x64::splat(b'n')).to_bitmask(),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The masks a byte at a time, the vector code's oracle.
    fn masks_by_bytes(block: &[u8]) -> Masks {
        let mask = |f: &dyn Fn(u8) -> bool| {
            block
                .iter()
                .enumerate()
                .fold(0u64, |m, (i, &b)| m | (u64::from(f(b)) << i))
        };
        Masks {
            quotes: mask(&|b| b == b'"'),
            backslashes: mask(&|b| b == b'\\'),
            controls: mask(&|b| b < 0x20),
            ns: mask(&|b| b == b'n'),
        }
    }

    /// Where a byte-wise scan from `from` ends a string body: the closing
    /// quote's index, `None` when it declines.
    fn end_by_bytes(bytes: &[u8], from: usize) -> Option<usize> {
        let mut at = from;
        loop {
            match *bytes.get(at)? {
                b'"' => return Some(at),
                b'\\' => at += escape_len(bytes.get(at + 1..)?)?,
                b if b < 0x20 => return None,
                _ => at += 1,
            }
        }
    }

    /// Where [`skip`] then the byte-wise scan end `bytes`.
    fn end_by_blocks(bytes: &[u8]) -> Option<usize> {
        match skip(bytes)? {
            Scan::End(end) => Some(end),
            Scan::Rest(from) => end_by_bytes(bytes, from),
        }
    }

    #[test]
    fn runs_of_backslashes_across_a_block_boundary() {
        // A run of n backslashes ending on the block's last byte, then a
        // quote: escaped when n is odd.
        for n in 1..=70usize {
            let mut body = vec![b'a'; BLOCK - n.min(BLOCK)];
            body.extend(std::iter::repeat_n(b'\\', n));
            body.extend_from_slice(
                b"\"tail, then the end\" and more text to fill a block.........",
            );
            let expected = end_by_bytes(&body, 0);
            assert_eq!(end_by_blocks(&body), expected, "{n} backslashes");
            let quote = body.iter().rposition(|&b| b == b'\\').unwrap() + 1;
            assert_eq!(expected.unwrap() == quote, n % 2 == 0, "{n}");
        }
    }

    #[test]
    fn a_prose_prompt_ends_at_its_quote() {
        let line = "The \\\"quick\\\" brown fox jumps over the lazy dog, twice.\\n";
        let body = format!(
            "{}\", \"model\": \"m\"}}{}",
            line.repeat(40),
            " ".repeat(BLOCK)
        );
        let end = line.len() * 40;
        assert_eq!(skip(body.as_bytes()), Some(Scan::End(end)));
    }

    #[test]
    fn declines_what_the_byte_scan_declines() {
        let pad = "x".repeat(100);
        for bad in ["\\x", "\\u12g4", "\\ud800", "\u{1}", "\t", "\\\u{1}"] {
            let body = format!("{pad}{bad}{pad}\"{pad}");
            assert_eq!(skip(body.as_bytes()), None, "{bad:?}");
        }
        // A control byte after the end is not the string's.
        let body = format!("{pad}\"\n{pad}");
        assert_eq!(skip(body.as_bytes()), Some(Scan::End(100)));
        // A `\u` whose digits cross into the next block.
        let body = format!("{}\\u00e9{pad}\"{pad}", "y".repeat(BLOCK - 3));
        assert_eq!(
            end_by_blocks(body.as_bytes()),
            end_by_bytes(body.as_bytes(), 0)
        );
    }

    #[test]
    fn a_surrogate_pair_anywhere_in_the_blocks_is_taken_whole() {
        // The pair at every offset in a block and across its end, with the
        // string's end in a later block or in the byte-wise rest.
        for pad in 0..2 * BLOCK {
            for after in [3, BLOCK + 17] {
                let body = format!("{}\\ud83d\\ude00{}\"", "x".repeat(pad), "y".repeat(after));
                let end = Some(body.len() - 1);
                assert_eq!(end_by_bytes(body.as_bytes(), 0), end, "{pad} {after}");
                assert_eq!(end_by_blocks(body.as_bytes()), end, "{pad} {after}");
                // A lone half is declined wherever it falls.
                let lone = body.replace("\\ude00", "\\u0041");
                assert_eq!(end_by_blocks(lone.as_bytes()), None, "{pad} {after}");
            }
        }
    }

    /// A `\u` escape of four digits drawn near hex (its letters in both
    /// cases, a surrogate's `d` and `8`–`f`, a non-digit), or a piece
    /// around one.
    fn unicode_piece() -> impl Strategy<Value = String> {
        let digit = prop::sample::select(vec![
            '0', '7', '8', '9', 'a', 'B', 'c', 'd', 'D', 'e', 'F', 'g', '"',
        ]);
        prop_oneof![
            4 => prop::collection::vec(digit, 4).prop_map(|d| format!("\\u{}", d.iter().collect::<String>())),
            1 => Just("\\ud83d\\ude00".to_owned()),
            1 => Just("\\n".to_owned()),
            1 => Just("y".to_owned()),
        ]
    }

    fn string_bytes() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop::sample::select(vec![
            b'a', b'\\', b'\\', b'"', b'n', b'u', b'0', b'e', b'D', b'8', 0x1f, 0x20, 0x7f, 0xc3,
            0xa9,
        ]);
        prop::collection::vec(byte, 0..400)
    }

    proptest! {
        #[test]
        fn masks_are_the_bytes(block in prop::collection::vec(any::<u8>(), BLOCK)) {
            let whole: &[u8; BLOCK] = block.as_slice().try_into().unwrap();
            prop_assert_eq!(Masks::of(whole), masks_by_bytes(&block));
        }

        #[test]
        fn unicode_escapes_end_a_string_where_the_byte_scan_does(
            pieces in prop::collection::vec(unicode_piece(), 0..60),
            plain in 0usize..70,
        ) {
            // `\u` escapes of any digits (hex or not, surrogates, pairs),
            // packed as text written all in escapes, at any offset.
            let mut body = vec![b'x'; plain];
            body.extend(pieces.concat().bytes());
            body.extend_from_slice(b"\" and the rest");
            prop_assert_eq!(end_by_blocks(&body), end_by_bytes(&body, 0), "{:?}", String::from_utf8_lossy(&body));
        }

        #[test]
        fn blocks_end_a_string_where_the_byte_scan_does(
            bytes in string_bytes(),
            plain in 0usize..130,
        ) {
            // A plain prefix of any length, so escapes fall anywhere in a
            // block and across its ends.
            let mut body = vec![b'x'; plain];
            body.extend(bytes);
            prop_assert_eq!(end_by_blocks(&body), end_by_bytes(&body, 0), "{:?}", body);
        }
    }
}
