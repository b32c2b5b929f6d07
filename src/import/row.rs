//! Writing Mooncake rows in the house style of the published traces
//! (`{"timestamp": 0, "input_length": 12, ...}`), straight into the output
//! buffer.

use crate::record::write_id_array;

/// Appends one JSON object, field by field, then `}` and `\n` on [`finish`].
///
/// [`finish`]: ObjWriter::finish
pub struct ObjWriter<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> ObjWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        ObjWriter { out, first: true }
    }

    /// Writes `"name": ` (after a `, ` when not the first field) and returns
    /// the buffer for the value.
    pub fn key(&mut self, name: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.extend_from_slice(b", ");
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b"\": ");
        self.out
    }

    pub fn uint(&mut self, name: &str, v: u64) {
        let b = itoa::Buffer::new().format(v).as_bytes().to_vec();
        self.key(name).extend_from_slice(&b);
    }

    pub fn int(&mut self, name: &str, v: i64) {
        let b = itoa::Buffer::new().format(v).as_bytes().to_vec();
        self.key(name).extend_from_slice(&b);
    }

    /// A value that is already JSON text.
    pub fn raw(&mut self, name: &str, json: &[u8]) {
        self.key(name).extend_from_slice(json);
    }

    /// A string value, escaped as JSON.
    pub fn str(&mut self, name: &str, s: &str) {
        let out = self.key(name);
        // Writing into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, s);
    }

    pub fn ids(&mut self, name: &str, ids: &[u64]) {
        write_id_array(ids, self.key(name));
    }

    pub fn finish(self) {
        self.out.extend_from_slice(b"}\n");
    }
}

/// Made-up block ids for formats without prefix information: every row gets
/// fresh ids (`ceil(input_length / B)` of them), so nothing is shared — the
/// only pattern that claims nothing the source does not say.
pub struct SynthIds {
    block_size: u64,
    next: u64,
    ids: Vec<u64>,
}

impl SynthIds {
    pub fn new(block_size: u64) -> Self {
        SynthIds {
            block_size: block_size.max(1),
            next: 0,
            ids: Vec::new(),
        }
    }

    pub fn next_row(&mut self, input_length: u64) -> &[u64] {
        let n = input_length.div_ceil(self.block_size);
        self.ids.clear();
        self.ids.extend(self.next..self.next + n);
        self.next += n;
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_house_style() {
        let mut out = Vec::new();
        let mut w = ObjWriter::new(&mut out);
        w.raw("timestamp", b"5");
        w.str("session_id", "a\"b");
        w.uint("input_length", 12);
        w.ids("hash_ids", &[0, 1]);
        w.finish();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"timestamp\": 5, \"session_id\": \"a\\\"b\", \"input_length\": 12, \"hash_ids\": [0, 1]}\n"
        );
    }

    #[test]
    fn synthesised_ids_are_fresh_per_row() {
        let mut s = SynthIds::new(512);
        assert_eq!(s.next_row(1024), [0, 1]);
        assert_eq!(s.next_row(1025), [2, 3, 4]);
        assert_eq!(s.next_row(0), [] as [u64; 0]);
        assert_eq!(s.next_row(1), [5]);
    }
}
