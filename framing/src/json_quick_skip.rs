//! The cursor's skips: any value ([`Cursor::skip_any`]), a string, a
//! number — what routing's pass and the readers do with every member they
//! do not read, so most of a long or deeply structured body's bytes pass
//! through here.

use super::blocks::{self, Scan};
use super::escapes::escape_len;
use super::{Cursor, MAX_SKIP_DEPTH, MAX_SKIPPED_NUMBER, key_run, short_plain_end, skipped_run};

impl<'a, const SPACED: bool> Cursor<'a, SPACED> {
    /// Skips any value this reader takes: a scalar, or an array or object of
    /// them nested up to `depth` levels ([`MAX_SKIP_DEPTH`] from the top,
    /// and never more). An array or object by a structural walk 64 bytes
    /// a step (`json_quick_walk.rs`); anything it does not take (and a
    /// scalar) token by token (`skip_any_by_tokens`), which then declines
    /// or not, and ends where it ends.
    pub fn skip_any(&mut self, depth: usize) -> Option<()> {
        if matches!(self.peek(), Some(b'{' | b'['))
            && let Some(end) = self.walk(depth)
        {
            self.at = end;
            return Some(());
        }
        self.skip_any_by_tokens(depth)
    }

    /// [`skip_any`](Self::skip_any) token by token: one loop over the
    /// tokens, the open containers a bit each: no recursion nor a closure
    /// a container (3 % fewer instructions on an agent's tools than the
    /// recursive walk it replaced, 1–4 % on other bodies). The structural
    /// walk's fallback and its oracle.
    pub(crate) fn skip_any_by_tokens(&mut self, depth: usize) -> Option<()> {
        // The open containers, innermost last: bit `i` of `objects` is set
        // when the container at level `i` is an object.
        let mut objects = 0u64;
        let mut level = 0usize;
        let depth = depth.min(MAX_SKIP_DEPTH);
        loop {
            // At a value.
            let mut opened = false;
            match self.peek()? {
                open @ (b'{' | b'[') => {
                    if level == depth {
                        return None;
                    }
                    self.at += 1;
                    self.space();
                    let object = open == b'{';
                    if self.eat(if object { b'}' } else { b']' }).is_none() {
                        objects = (objects & !(1 << level)) | (u64::from(object) << level);
                        level += 1;
                        opened = true;
                        if object {
                            self.member_key()?;
                        }
                    }
                }
                b'"' => self.skip_string()?,
                b'-' | b'0'..=b'9' => self.skip_number()?,
                _ => drop(self.scalar()?),
            }
            if opened {
                continue;
            }
            // After a value: the next member or element, or the ends of
            // the containers it closes.
            loop {
                let Some(inner) = level.checked_sub(1) else {
                    return Some(());
                };
                let object = objects >> inner & 1 == 1;
                if self.next_or_end(if object { b'}' } else { b']' })? {
                    if object {
                        self.member_key()?;
                    }
                    break;
                }
                level = inner;
            }
        }
    }

    /// A member's key (without escapes) and its colon, the whitespace
    /// around taken when spaced.
    #[inline(always)]
    fn member_key(&mut self) -> Option<()> {
        let (_, false) = self.string(key_run)? else {
            return None;
        };
        self.space();
        self.eat(b':')?;
        self.space();
        Some(())
    }

    /// Skips a value as [`skip_any`](Self::skip_any) does, and gives its
    /// text: for a reader that leaves the few values it keeps to serde.
    pub fn skip_any_text(&mut self, depth: usize) -> Option<&'a str> {
        let start = self.at;
        self.skip_any(depth)?;
        self.text.get(start..self.at)
    }

    /// A string's raw body (between its quotes, escapes as written), its
    /// escapes checked as [`skip_any`](Self::skip_any) checks them: for a
    /// long text, whose escapes [`unescape`](super::unescape) then reads.
    pub fn raw_string(&mut self) -> Option<&'a str> {
        let start = self.at + 1;
        self.skip_string()?;
        self.text.get(start..self.at - 1)
    }

    /// Skips a string, its escapes checked: any but a lone or reversed
    /// surrogate's `\u`.
    /// A short plain one a word at a time ([`short_plain_end`]); else by
    /// blocks of 64 bytes ([`blocks`]) while they last, then byte-wise.
    pub(super) fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        let start = self.at;
        let bytes = self.text.as_bytes();
        let scan = match short_plain_end(&bytes[start..]) {
            Some(end) => Scan::End(end),
            None => blocks::skip(&bytes[start..])?,
        };
        match scan {
            Scan::End(end) => {
                self.at = start + end + 1;
                Some(())
            }
            Scan::Rest(from) => {
                let from = start + from;
                let stop = from + skipped_run(&bytes[from..])?;
                self.escaped_string(start, stop, skipped_run, escape_len)
                    .map(drop)
            }
        }
    }

    /// Skips a number: `-`, an integer without leading zeros, a fraction;
    /// no exponent, at most [`MAX_SKIPPED_NUMBER`] bytes.
    pub(super) fn skip_number(&mut self) -> Option<()> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut at = start + usize::from(bytes[start] == b'-');
        let digits = |from: usize| {
            bytes.get(from..).map_or(0, |rest| {
                rest.iter().take_while(|b| b.is_ascii_digit()).count()
            })
        };
        let whole = digits(at);
        if whole == 0 || (whole > 1 && bytes[at] == b'0') {
            return None;
        }
        at += whole;
        if bytes.get(at) == Some(&b'.') {
            let fraction = digits(at + 1);
            if fraction == 0 {
                return None;
            }
            at += 1 + fraction;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) || at - start > MAX_SKIPPED_NUMBER {
            return None;
        }
        self.at = at;
        Some(())
    }
}
