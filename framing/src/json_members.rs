//! A JSON object written from members whose texts were already checked,
//! with an index of where each member lies in it, so that whoever reads
//! the object next need not walk it again.
//!
//! The Edge reads a run's parameters out of the client's body with
//! [`crate::json_quick`]'s cursor and passes them to the Node as one object
//! (`RunInput.parameters_json`); an agent's turn puts tens of tool schemas
//! in it, ~20 KB. Walked again on the Node to find its members, that object
//! cost ~117k of the Node's ~231k instructions a request with 24 tools
//! (issue 8, `TOOLS=24 hack/instructions.sh`). With the index
//! (`RunInput.parameters_index`) the Node takes each member's key and value
//! as slices.
//!
//! **The index:** four offsets a member, in the object's order: the key's
//! first byte (just after its opening quote), its closing quote, the
//! value's first byte, and one past its last. [`members`] takes an index
//! only if every offset is in order, in range and on a character boundary,
//! and every key is quoted and holds no quote, backslash or control byte;
//! otherwise it answers `None` and the reader walks the object as it would
//! without one. The values are trusted to be the JSON their writer checked:
//! an index is a promise between the two ends of the link, not a check of
//! a client's input.

/// `members` — keys without escapes (as [`crate::json_quick::Cursor::object`]
/// hands them out), values JSON text — as one compact JSON object, and its
/// index. The index is empty (read the object instead) when the object is
/// too long for `u32` offsets.
pub fn write_indexed<V: AsRef<[u8]>>(members: &[(&str, V)]) -> (Vec<u8>, Vec<u32>) {
    let size: usize = members
        .iter()
        .map(|(key, value)| key.len() + value.as_ref().len() + 4)
        .sum();
    let mut out = Vec::with_capacity(size + 2);
    let mut index = Vec::with_capacity(members.len() * 4);
    out.push(b'{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        index.push(out.len());
        out.extend_from_slice(key.as_bytes());
        index.push(out.len());
        out.extend_from_slice(b"\":");
        index.push(out.len());
        out.extend_from_slice(value.as_ref());
        index.push(out.len());
    }
    out.push(b'}');
    let index = index
        .into_iter()
        .map(u32::try_from)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default();
    (out, index)
}

/// The (key, value text) members of `object` that `index` says are there,
/// in order; `None` when the index is empty or not one that
/// [`write_indexed`] could have written for `object` (see the module docs).
pub fn members<'a>(object: &'a str, index: &[u32]) -> Option<Vec<(&'a str, &'a str)>> {
    if index.is_empty() || !index.len().is_multiple_of(4) {
        return None;
    }
    let bytes = object.as_bytes();
    let mut members = Vec::with_capacity(index.len() / 4);
    let mut end = 0;
    for member in index.chunks_exact(4) {
        let [key_start, key_end, value_start, value_end] =
            [member[0], member[1], member[2], member[3]].map(|at| at as usize);
        let in_order = end < key_start
            && key_start <= key_end
            && key_end < value_start
            && value_start < value_end
            && value_end <= bytes.len();
        if !in_order
            || bytes[key_start - 1] != b'"'
            || bytes[key_end] != b'"'
            || bytes[key_start..key_end]
                .iter()
                .any(|&b| b == b'"' || b == b'\\' || b < 0x20)
            || !object.is_char_boundary(value_start)
            || !object.is_char_boundary(value_end)
        {
            return None;
        }
        // The key's ends border ASCII quotes: character boundaries both.
        members.push((&object[key_start..key_end], &object[value_start..value_end]));
        end = value_end;
    }
    Some(members)
}

#[cfg(test)]
#[path = "json_members_tests.rs"]
mod tests;
