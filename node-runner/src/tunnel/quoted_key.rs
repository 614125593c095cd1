//! [`QuotedKey`]: finds a quoted JSON member name (`"usage"`) in a relayed
//! event's bytes, and is fast on large events.
//!
//! The tap looks for `"usage"` in every event it relays, 64 KiB ones too.
//! memmem's packed-pair loop (two loads and two compares every 32 bytes)
//! ran at about a third of `memchr`'s speed on a long haystack: 3.1 µs
//! against 1.0–1.3 µs for a 64 KiB event on the Intel machine
//! (`bench-results/profiles.md`, round 41), and it was the dearer of the
//! tap's two passes over a bulk stream. Searched as below, the Node's
//! user-space instructions a MiB of 64 KiB events fell from 728k to 560k.
//!
//! The name starts with a quote, and in JSON a quote ends a string or is
//! escaped inside one: a large event, mostly one long string of generated
//! text, has few. A haystack of at least [`LONG`] bytes is so searched
//! quote by quote with `memchr`, each quote checked for the name where it
//! stands (the same occurrences memmem finds, escaped ones included). Past
//! [`MIN_STOPS`] quotes — more than the JSON around a chunk's text has —
//! a haystack whose quotes are closer than [`MEAN_GAP`] bytes apart on
//! average (JSON structure, or escaped JSON in a string) has its rest
//! searched by memmem, so the stops cost at most about one per
//! [`MEAN_GAP`] bytes searched past the first. A shorter haystack (every
//! token event) goes to memmem directly: its quotes are a few bytes apart.

use memchr::memmem::Finder;

/// The shortest haystack searched quote by quote.
pub(super) const LONG: usize = 2048;

/// Quotes passed before the density test applies: more than a chunk's
/// JSON around its text has (an OpenAI chunk ~30, before and after its
/// `content`), so a large event is searched quote by quote to its end.
const MIN_STOPS: usize = 64;

/// Quotes closer than this many bytes apart on average are dense.
const MEAN_GAP: usize = 256;

/// A finder of one quoted JSON member name; see the module docs. Built once
/// per name (callers keep it in a static: building a finder per search
/// cost more than the search on a token-sized event, ~13 % of the Node's
/// samples in `s2/tunnel`).
#[derive(Debug)]
pub(super) struct QuotedKey {
    finder: Finder<'static>,
}

impl QuotedKey {
    /// The finder of `name`, quotes included (`b"\"usage\""`).
    ///
    /// # Panics
    /// If `name` is not a quoted name (a programming error: every caller
    /// passes a constant).
    pub(super) fn new(name: &'static [u8]) -> Self {
        assert!(
            name.len() >= 2 && name.starts_with(b"\"") && name.ends_with(b"\""),
            "not a quoted name"
        );
        Self {
            finder: Finder::new(name),
        }
    }

    /// The name, quotes included.
    pub(super) fn needle(&self) -> &[u8] {
        self.finder.needle()
    }

    /// The index of the name's first occurrence in `json`.
    pub(super) fn find(&self, json: &[u8]) -> Option<usize> {
        self.find_counting(json).0
    }

    /// [`find`](Self::find), and how many quotes it stopped at.
    #[inline]
    fn find_counting(&self, json: &[u8]) -> (Option<usize>, usize) {
        if json.len() < LONG {
            return (self.finder.find(json), 0);
        }
        let needle = self.needle();
        let mut pos = 0;
        let mut stops = 0;
        while let Some(i) = memchr::memchr(b'"', &json[pos..]) {
            let at = pos + i;
            if json[at..].starts_with(needle) {
                return (Some(at), stops);
            }
            pos = at + 1;
            stops += 1;
            if stops >= MIN_STOPS && pos < stops * MEAN_GAP {
                return (self.finder.find(&json[pos..]).map(|i| pos + i), stops);
            }
        }
        (None, stops)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn usage() -> QuotedKey {
        QuotedKey::new(b"\"usage\"")
    }

    fn naive(json: &[u8]) -> Option<usize> {
        json.windows(7).position(|w| w == b"\"usage\"")
    }

    /// A chunk as an OpenAI-compatible server streams it, its text `text`.
    fn chunk(text: &str) -> String {
        format!(
            "{{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\
             \"model\":\"m\",\"system_fingerprint\":\"fp\",\"choices\":[{{\"index\":0,\
             \"delta\":{{\"role\":\"assistant\",\"content\":\"{text}\"}},\"logprobs\":null,\
             \"finish_reason\":null}}],\"usage\":null}}"
        )
    }

    #[test]
    fn a_large_chunk_is_searched_quote_by_quote_to_its_end() {
        let json = chunk(&".".repeat(64 * 1024));
        let quotes = json.matches('"').count();
        let at = json.find("\"usage\"").unwrap();
        assert_eq!(
            usage().find_counting(json.as_bytes()),
            (Some(at), quotes - 2)
        );
        let json = json.replace("\"usage\"", "\"other\"");
        let none = usage().find_counting(json.as_bytes());
        assert_eq!(
            none,
            (None, quotes),
            "every quote visited, none left to memmem"
        );
    }

    #[test]
    fn finds_the_name_after_sparse_or_dense_quotes() {
        let key = usage();
        let sparse = format!("{{\"pad\":\"{}\",\"usage\":{{}}}}", ".".repeat(64 * 1024));
        let dense = format!(
            "{{\"pad\":\"{}\",\"usage\":{{}}}}",
            "\\\"a".repeat(4 * LONG)
        );
        let late_dense = format!(
            "{{\"pad\":\"{}{}\",\"usage\":{{}}}}",
            ".".repeat(3 * LONG),
            "\\\"".repeat(LONG)
        );
        for json in [sparse, dense, late_dense] {
            let json = json.as_bytes();
            assert_eq!(key.find(json), naive(json));
            assert!(key.find(json).is_some());
            let cut = &json[..json.len() - 12];
            assert_eq!(key.find(cut), None, "the name cut short is not found");
        }
    }

    #[test]
    fn the_name_right_after_the_last_stop_is_found() {
        // A run of quotes, then the name: the search goes back to memmem
        // at any of them, the name's own quote included.
        let key = usage();
        for quotes in 0..2 * MIN_STOPS {
            let json = [&b"\"".repeat(quotes)[..], b"\"usage\"", &[b'.'; LONG]].concat();
            assert_eq!(key.find(&json), Some(quotes), "{quotes} quotes before");
        }
    }

    #[test]
    fn dense_quotes_cost_a_bounded_number_of_stops() {
        // Past the first stops, at most one stop per MEAN_GAP bytes: a
        // quote-dense document is not searched a quote at a time.
        let key = usage();
        for json in [
            "\\\"a".repeat(8 * LONG),
            format!("{}{}", ".".repeat(16 * LONG), "\"".repeat(8 * LONG)),
        ] {
            let (found, stops) = key.find_counting(json.as_bytes());
            assert_eq!(found, None);
            assert!(stops <= MIN_STOPS + json.len() / MEAN_GAP, "{stops} stops");
            assert!(stops < json.matches('"').count() / 2, "{stops} stops");
        }
        let sparse = format!("{}\"", ".".repeat(16 * LONG)).repeat(4);
        assert_eq!(key.find_counting(sparse.as_bytes()), (None, 4));
    }

    #[test]
    #[should_panic(expected = "not a quoted name")]
    fn a_name_must_be_quoted() {
        QuotedKey::new(b"usage");
    }

    proptest! {
        #[test]
        fn agrees_with_a_naive_search(
            parts in prop::collection::vec(
                prop_oneof![
                    1 => Just(&b"\"usage\""[..]),
                    2 => Just(&b"\"usag"[..]),
                    6 => Just(&b"\""[..]),
                    20 => Just(&[b'.'; 200][..]),
                    8 => Just(&[b'.'; 8][..]),
                    4 => Just(&b"ge\":"[..]),
                ],
                0..120,
            ),
        ) {
            let json = parts.concat();
            let key = usage();
            for from in [0, 1, 7] {
                let json = &json[from.min(json.len())..];
                prop_assert_eq!(key.find(json), naive(json));
            }
        }
    }
}
