//! [`NameSet`]: a fixed set of header names, matched without case, that
//! refuses most names without comparing a byte.
//!
//! A proxy drops hop-by-hop and framing fields from every message it
//! relays, so each field of each head is looked up in such a set. Most
//! fields are in none (`content-type`, `accept`, `authorization`). A set
//! records which lengths its members have: a name of any other length is
//! refused at once, and only a name of a member's length is compared, with
//! the members of that length alone. (On a small answer's four or five
//! fields this measured the same as a scan of every member, whose
//! comparisons stop at the length too: `bench-results/profiles.md`, round
//! 47. It keeps one type for the lists of the Edge and the Node.)

/// A fixed set of header names (see the module docs). Members are
/// lowercase ASCII; lookups ignore ASCII case.
#[derive(Debug, Clone, Copy)]
pub struct NameSet {
    names: &'static [&'static str],
    /// Bit `n` set: a member is `n` bytes long (members are under 64).
    lengths: u64,
}

impl NameSet {
    /// The set of `names`.
    ///
    /// # Panics
    /// At compile time (it is meant for constants) if a member is 64 bytes
    /// or longer, or is not lowercase ASCII.
    pub const fn new(names: &'static [&'static str]) -> Self {
        let mut lengths = 0u64;
        let mut i = 0;
        while i < names.len() {
            let name = names[i].as_bytes();
            assert!(name.len() < 64, "a member of a NameSet is under 64 bytes");
            let mut j = 0;
            while j < name.len() {
                assert!(
                    name[j].is_ascii() && !name[j].is_ascii_uppercase(),
                    "a member of a NameSet is lowercase ASCII"
                );
                j += 1;
            }
            lengths |= 1 << name.len();
            i += 1;
        }
        Self { names, lengths }
    }

    /// Whether `name` is a member, ignoring ASCII case.
    pub fn contains(&self, name: &[u8]) -> bool {
        let len = name.len();
        if len >= 64 || self.lengths & (1 << len) == 0 {
            return false;
        }
        self.names
            .iter()
            .any(|member| member.len() == len && member.as_bytes().eq_ignore_ascii_case(name))
    }

    /// The members, as given.
    pub fn names(&self) -> &'static [&'static str] {
        self.names
    }
}

#[cfg(test)]
mod tests {
    use super::NameSet;
    use proptest::prelude::*;

    const HOP: NameSet = NameSet::new(&[
        "connection",
        "keep-alive",
        "te",
        "transfer-encoding",
        "content-length",
    ]);

    #[test]
    fn members_match_in_any_case_and_nothing_else_does() {
        for name in [
            "connection",
            "Connection",
            "KEEP-ALIVE",
            "te",
            "Te",
            "Transfer-Encoding",
        ] {
            assert!(HOP.contains(name.as_bytes()), "{name}");
        }
        for name in [
            "",
            "t",
            "tea",
            "content-type",
            "connectioN2",
            "keep_alive",
            "content-lengt",
            "x-connection",
        ] {
            assert!(!HOP.contains(name.as_bytes()), "{name}");
        }
        assert!(!HOP.contains(&[b'a'; 64]), "past every member's length");
        assert!(!HOP.contains(&[b'a'; 300]));
        assert_eq!(HOP.names().len(), 5);
    }

    proptest! {
        /// The same answer as comparing with every member.
        #[test]
        fn agrees_with_a_scan(name in "[a-zA-Z-]{0,20}|(?i)(connection|keep-alive|te|transfer-encoding|content-length)") {
            let scan = HOP.names().iter().any(|m| m.as_bytes().eq_ignore_ascii_case(name.as_bytes()));
            prop_assert_eq!(HOP.contains(name.as_bytes()), scan);
        }
    }
}
