//! [`Cursor::skip_any`] over a container, 64 bytes a step: a structural
//! walk in the manner of simdjson's first stage.
//!
//! An agent's turn carries its tools' JSON schemas: short keys, strings of
//! a few dozen bytes, `", "` between them. The token walk
//! ([`Cursor::skip_any_by_tokens`]) paid a scan set up for every key and
//! string there, ~8 instructions a byte. Here each block of 64 bytes is
//! read as bit masks (its quotes, backslashes and control bytes, and its
//! spaces when the cursor is spaced), by `wide` as [`blocks`](super::blocks)
//! reads a long string:
//!
//! - The bytes escaped are found from the backslashes as `blocks` finds
//!   them ([`escaped`]), so the quotes left open or close a string, and
//!   their prefix XOR ([`prefix_xor`]) is the mask of the bytes inside
//!   one (its opening quote with them, not its closing one).
//! - The tokens are the bytes outside strings other than a space (a
//!   space is no token when the cursor is spaced), and the opening quotes:
//!   the walk takes them one by one (`trailing_zeros`) through the token
//!   walk's grammar as a table of states ([`STEPS`]: a value, a key, a
//!   colon, a comma or a closer), one load a token, so a string's body
//!   costs nothing there. A scalar is read by the token walk's own code
//!   (a number by [`Cursor::skip_number`], a literal by its word), and the
//!   tokens before its end are dropped: whatever of its run it did not
//!   take is the next token, which declines (`truex`, `1e5`).
//! - Once a block is walked (or up to a value's end), its strings' bodies
//!   are checked: no control byte, each escape as [`check_letters`] takes it
//!   (the commonest by their masks, as `blocks` does), no backslash in a
//!   key (whose quotes the walk marks only in a block with a backslash).
//! - A block wholly inside a string (a long prompt, an image's base64)
//!   costs its three masks and their checks alone.
//!
//! An agent's turn with 24 tools (21 KB) costs ~107k instructions here
//! against ~169k by the token walk; a long prompt about what `blocks` costs
//! (callgrind, the skip alone: 1,000 skips of each body).
//!
//! The walk only ever takes what the token walk takes, to the same end:
//! anything it declines (`None`) the token walk reads again from the
//! start, so a decline and its position are the token walk's own.

use wide::u8x64;

use super::blocks::{BLOCK, check_letters, escaped};
use super::{Cursor, MAX_SKIP_DEPTH};

// The walk's states: what it takes next.
/// A value, after a colon.
const VALUE_IN_OBJECT: u8 = 1;
/// A value, after a comma in an array.
const VALUE_IN_ARRAY: u8 = 2;
/// A value or `]`, after `[`.
const VALUE_OR_CLOSE: u8 = 3;
/// A key, after a comma in an object.
const KEY: u8 = 4;
/// A key or `}`, after `{`.
const KEY_OR_CLOSE: u8 = 5;
/// The colon after a key.
const COLON: u8 = 6;
/// A comma or `}`, after a member's value.
const NEXT_IN_OBJECT: u8 = 7;
/// A comma or `]`, after an element.
const NEXT_IN_ARRAY: u8 = 8;

// A transition past the states: a step with more to do than a new state.
/// `{` or `[`: a container opens.
const OPEN: u8 = 16;
/// The innermost container's closer.
const CLOSE: u8 = 17;
/// A key's opening quote (its body is checked for backslashes).
const KEY_QUOTE: u8 = 18;
/// A number or a literal as a member's value.
const SCALAR_IN_OBJECT: u8 = 19;
/// A number or a literal as an element.
const SCALAR_IN_ARRAY: u8 = 20;
/// Declined.
const NO: u8 = 255;

/// The walk's transitions, `[spaced][marking][256 * state + token]`: the
/// next state's row (`256 * state`, below [`PAST`]), or [`PAST`] and one
/// of the steps past the states. The grammar of
/// [`Cursor::skip_any_by_tokens`] ([`steps`]); a row, not a state, so that
/// a token costs one load and no shift. `marking` for a block with a
/// backslash, whose keys' quotes are marked ([`KEY_QUOTE`]) to check
/// their bodies; in any other a key's quote is a plain step.
static STEPS: [[[u16; 16 * 256]; 2]; 2] = [
    [rows(steps(false, false)), rows(steps(false, true))],
    [rows(steps(true, false)), rows(steps(true, true))],
];

/// Where [`STEPS`]' steps past the states begin.
const PAST: u16 = 16 * 256;

/// The state of a row of [`STEPS`].
const fn row(state: u8) -> u16 {
    state as u16 * 256
}

/// [`steps`] flat, by rows.
const fn rows(steps: [[u8; 256]; 16]) -> [u16; 16 * 256] {
    let mut rows = [0; 16 * 256];
    let mut at = 0;
    while at < rows.len() {
        let step = steps[at / 256][at % 256];
        rows[at] = if step < 16 {
            row(step)
        } else {
            PAST + step as u16
        };
        at += 1;
    }
    rows
}

/// The walk's transitions for a cursor spaced or not, `[state][token]`:
/// the next state, or a step past the states (whitespace other than a
/// space is a token that keeps the state when spaced).
const fn steps(spaced: bool, marking: bool) -> [[u8; 256]; 16] {
    let mut steps = [[NO; 256]; 16];
    let mut state = VALUE_IN_OBJECT;
    while state <= NEXT_IN_ARRAY {
        let s = state as usize;
        if spaced {
            steps[s][b'\t' as usize] = state;
            steps[s][b'\n' as usize] = state;
            steps[s][b'\r' as usize] = state;
        }
        if state <= VALUE_OR_CLOSE {
            steps[s][b'"' as usize] = if state == VALUE_IN_OBJECT {
                NEXT_IN_OBJECT
            } else {
                NEXT_IN_ARRAY
            };
            steps[s][b'{' as usize] = OPEN;
            steps[s][b'[' as usize] = OPEN;
            let scalar = if state == VALUE_IN_OBJECT {
                SCALAR_IN_OBJECT
            } else {
                SCALAR_IN_ARRAY
            };
            let mut digit = b'0';
            while digit <= b'9' {
                steps[s][digit as usize] = scalar;
                digit += 1;
            }
            steps[s][b'-' as usize] = scalar;
            steps[s][b't' as usize] = scalar;
            steps[s][b'f' as usize] = scalar;
            steps[s][b'n' as usize] = scalar;
        }
        state += 1;
    }
    steps[VALUE_OR_CLOSE as usize][b']' as usize] = CLOSE;
    let key = if marking { KEY_QUOTE } else { COLON };
    steps[KEY as usize][b'"' as usize] = key;
    steps[KEY_OR_CLOSE as usize][b'"' as usize] = key;
    steps[KEY_OR_CLOSE as usize][b'}' as usize] = CLOSE;
    steps[COLON as usize][b':' as usize] = VALUE_IN_OBJECT;
    steps[NEXT_IN_OBJECT as usize][b',' as usize] = KEY;
    steps[NEXT_IN_OBJECT as usize][b'}' as usize] = CLOSE;
    steps[NEXT_IN_ARRAY as usize][b',' as usize] = VALUE_IN_ARRAY;
    steps[NEXT_IN_ARRAY as usize][b']' as usize] = CLOSE;
    steps
}

impl<const SPACED: bool> Cursor<'_, SPACED> {
    /// The end (the index past its last byte) of the array or object at
    /// the cursor, nested up to `depth` levels, as
    /// [`skip_any_by_tokens`](Self::skip_any_by_tokens) would skip it;
    /// `None` for anything else (that walk then declines or not).
    pub(super) fn walk(&self, depth: usize) -> Option<usize> {
        let bytes = self.text.as_bytes();
        // The open containers as in `skip_any_by_tokens`: bit `i` of
        // `objects` set when the one at level `i` is an object.
        let depth = depth.min(MAX_SKIP_DEPTH);
        if depth == 0 {
            return None;
        }
        let mut objects = u64::from(bytes[self.at] == b'{');
        let mut level = 1usize;
        // The row of the state in `steps`.
        let mut state = row(if objects == 1 {
            KEY_OR_CLOSE
        } else {
            VALUE_OR_CLOSE
        });
        // The letter of a low surrogate's `\u` that a pair checked before
        // it covers.
        let mut paired_low = usize::MAX;
        let mut base = self.at;
        // The opener, taken.
        let mut taken = 1u64;
        // All ones when the block's first byte is inside a string.
        let mut in_string = 0u64;
        // 1 when the block's first byte is escaped.
        let mut escape_carry = 0u64;
        // 1 when it is inside a key.
        let mut key_carry = 0u64;
        let mut pad;
        'blocks: loop {
            let block: &[u8; BLOCK] = match bytes.split_at_checked(base) {
                Some((_, rest)) if rest.len() >= BLOCK => rest.first_chunk()?,
                _ => {
                    // Fewer left: padded with spaces (no token when spaced,
                    // a declined one when not, plain bytes in a string).
                    let rest = bytes.get(base..).filter(|rest| !rest.is_empty())?;
                    pad = [b' '; BLOCK];
                    pad[..rest.len()].copy_from_slice(rest);
                    &pad
                }
            };
            let v = u8x64::new(*block);
            let quotes = v.simd_eq(u8x64::splat(b'"')).to_bitmask();
            let backslashes = v.simd_eq(u8x64::splat(b'\\')).to_bitmask();
            let controls = v.min(u8x64::splat(0x1f)).simd_eq(v).to_bitmask();
            let (escaped, carry_out) = if backslashes | escape_carry == 0 {
                (0, 0)
            } else {
                escaped(backslashes, escape_carry)
            };
            let real = quotes & !escaped;
            let letters = escaped & !(quotes | backslashes);
            // The block's strings, given its bytes inside them.
            let strings_inside = |inside| Strings {
                bytes,
                base,
                block,
                inside,
                backslashes,
                controls,
                letters,
            };
            if in_string != 0 && real == 0 {
                // Wholly inside a string (a key's when `key_carry`): its
                // body's checks alone.
                strings_inside(!0).check(!0, key_carry, &mut paired_low)?;
                escape_carry = carry_out;
                base += BLOCK;
                continue;
            }
            let inside = prefix_xor(real) ^ in_string;
            let strings = strings_inside(inside);
            let mut tokens = (!(inside | real) | (real & inside)) & !taken;
            if SPACED {
                tokens &= !v.simd_eq(u8x64::splat(b' ')).to_bitmask();
            }
            // The opening quotes of its keys (when it has a backslash).
            let steps = &STEPS[usize::from(SPACED)][usize::from(backslashes != 0)];
            let mut keys = key_carry;
            // The bits walked (all, unless the value ends here).
            let mut walked = !0u64;
            while tokens != 0 {
                let at = tokens.trailing_zeros() as usize;
                tokens &= tokens - 1;
                let step = steps[usize::from(state | u16::from(block[at])) & (PAST as usize - 1)];
                if step < PAST {
                    state = step;
                    continue;
                }
                match (step - PAST) as u8 {
                    KEY_QUOTE => {
                        keys |= 1 << at;
                        state = row(COLON);
                    }
                    OPEN => {
                        if level == depth {
                            return None;
                        }
                        let object = block[at] == b'{';
                        objects = (objects & !(1 << level)) | (u64::from(object) << level);
                        level += 1;
                        state = row(if object { KEY_OR_CLOSE } else { VALUE_OR_CLOSE });
                    }
                    CLOSE => {
                        level -= 1;
                        if level == 0 {
                            walked = !0 >> (BLOCK - 1 - at);
                            break;
                        }
                        state = row(if objects >> (level - 1) & 1 == 1 {
                            NEXT_IN_OBJECT
                        } else {
                            NEXT_IN_ARRAY
                        });
                    }
                    SCALAR_IN_OBJECT | SCALAR_IN_ARRAY => {
                        let end = self.scalar_end(base + at, block[at])?;
                        state = row(if step == PAST + u16::from(SCALAR_IN_OBJECT) {
                            NEXT_IN_OBJECT
                        } else {
                            NEXT_IN_ARRAY
                        });
                        if end - base < BLOCK {
                            tokens &= !0 << (end - base);
                        } else {
                            // Its run goes on past the block (no string
                            // nor escape in it): on from its end.
                            strings.check(!0, keys, &mut paired_low)?;
                            base = end;
                            taken = 0;
                            in_string = 0;
                            escape_carry = 0;
                            key_carry = 0;
                            continue 'blocks;
                        }
                    }
                    _ => return None,
                }
            }
            strings.check(walked, keys, &mut paired_low)?;
            if level == 0 {
                return Some(base + BLOCK - walked.leading_zeros() as usize);
            }
            in_string = 0u64.wrapping_sub(inside >> (BLOCK - 1));
            escape_carry = carry_out;
            // Inside a string after a key's quote: inside the key.
            key_carry = u64::from(state == row(COLON)) & in_string;
            taken = 0;
            base += BLOCK;
        }
    }

    /// The end of the scalar beginning at `at` with `first` (a number or a
    /// literal), read as [`skip_any_by_tokens`](Self::skip_any_by_tokens)
    /// reads it: a number by the same `skip_number`, a literal by its word
    /// here (through [`Cursor::scalar`] an agent's tools cost 6.6 % more,
    /// through its `eat_word` 2.6 %).
    #[inline]
    fn scalar_end(&self, at: usize, first: u8) -> Option<usize> {
        let word: &[u8] = match first {
            b't' => b"true",
            b'f' => b"false",
            b'n' => b"null",
            _ => {
                let mut number = Cursor::<SPACED> {
                    text: self.text,
                    at,
                };
                number.skip_number()?;
                return Some(number.at);
            }
        };
        self.text.as_bytes()[at..]
            .starts_with(word)
            .then_some(at + word.len())
    }
}

/// Bit `i` set when the quotes at or below `i` are odd in number.
#[inline(always)]
fn prefix_xor(mut bits: u64) -> u64 {
    bits ^= bits << 1;
    bits ^= bits << 2;
    bits ^= bits << 4;
    bits ^= bits << 8;
    bits ^= bits << 16;
    bits ^= bits << 32;
    bits
}

/// A block's masks its strings' bodies are checked by.
struct Strings<'b> {
    /// The document.
    bytes: &'b [u8],
    /// Where the block begins in it.
    base: usize,
    /// The block's bytes.
    block: &'b [u8; BLOCK],
    /// Its bytes inside strings.
    inside: u64,
    /// Its backslashes (a key has none).
    backslashes: u64,
    /// Its control bytes (a string has none).
    controls: u64,
    /// The letters its escapes begin with, other than `"` and `\` (`n`
    /// too is taken out before they are checked).
    letters: u64,
}

impl Strings<'_> {
    /// Checks the bytes inside strings among `walked`: no control byte,
    /// no backslash in the keys whose opening quotes are `keys` (bit 0 too
    /// when one goes on from the block before), and each escape's letter
    /// as [`check_letters`] checks it.
    #[inline(always)]
    fn check(&self, walked: u64, keys: u64, paired_low: &mut usize) -> Option<()> {
        let inside = self.inside & walked;
        // A key's body: the run of `inside` from its quote, which adding
        // the quote's bit clears.
        let after_keys = self.inside.wrapping_add(keys);
        if (self.controls | (self.backslashes & !after_keys)) & inside != 0 {
            return None;
        }
        let mut letters = self.letters & inside;
        if letters != 0 {
            letters = not_newlines(self.block, letters);
        }
        if letters != 0 {
            check_letters(self.bytes, self.base, self.block, letters, paired_low)?;
        }
        Some(())
    }
}

/// The letters among `letters` (bits of `block`) that are not `n`, the
/// letter of the commonest escape, `\n`: by a look at each when there are
/// one or two (a prompt's block has about one), else by their mask.
#[inline(always)]
fn not_newlines(block: &[u8; BLOCK], letters: u64) -> u64 {
    let beyond_one = letters & letters.wrapping_sub(1);
    if beyond_one & beyond_one.wrapping_sub(1) != 0 {
        return letters & !u8x64::new(*block).simd_eq(u8x64::splat(b'n')).to_bitmask();
    }
    let mut other = 0;
    let mut rest = letters;
    while rest != 0 {
        let lowest = rest & rest.wrapping_neg();
        if block[rest.trailing_zeros() as usize & (BLOCK - 1)] != b'n' {
            other |= lowest;
        }
        rest ^= lowest;
    }
    other
}

#[cfg(test)]
#[path = "json_quick_walk_tests.rs"]
mod tests;
