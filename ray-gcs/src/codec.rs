//! The byte encoding of table rows written to [`Storage`](crate::Storage).
//!
//! A small hand-written format rather than rkyv: rows hold types from other
//! crates (resource sets) that have no archive form, and decoding must turn
//! any byte string into either a row or an error, never a panic. Every row
//! starts with a format version byte so the encoding can evolve; integers are
//! little-endian, variable-length fields are prefixed with a `u32` length.

use std::time::Duration;

/// Why a stored row could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) String);

impl DecodeError {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Appends fields to a row's bytes.
pub(crate) struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// Starts a row in format `version`.
    pub(crate) fn new(version: u8) -> Self {
        Self { buf: vec![version] }
    }

    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    pub(crate) fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }

    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn len(&mut self, len: usize) -> &mut Self {
        let len = u32::try_from(len).expect("a table row field is smaller than 4 GiB");
        self.u32(len)
    }

    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.len(v.len());
        self.buf.extend_from_slice(v);
        self
    }

    pub(crate) fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    pub(crate) fn duration(&mut self, v: Duration) -> &mut Self {
        self.u64(v.as_secs()).u32(v.subsec_nanos())
    }

    pub(crate) fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(s) => self.u8(1).str(s),
        }
    }

    pub(crate) fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads fields back from a row's bytes; every read checks bounds.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
}

impl<'a> Decoder<'a> {
    /// Opens a row, checking that it is in format `version`.
    pub(crate) fn new(buf: &'a [u8], version: u8) -> Result<Self, DecodeError> {
        let mut d = Self { buf };
        let found = d.u8()?;
        if found != version {
            return Err(DecodeError::new(format!(
                "unknown row format version {found} (expected {version})"
            )));
        }
        Ok(d)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::new(format!(
                "truncated row: needed {n} more bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N)?;
        Ok(bytes.try_into().expect("take returned exactly N bytes"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(DecodeError::new(format!("invalid bool byte {b}"))),
        }
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length prefix; the count of items that follow, not trusted for
    /// allocation (each item read checks its own bounds).
    pub(crate) fn len(&mut self) -> Result<usize, DecodeError> {
        let len = self.u32()?;
        usize::try_from(len).map_err(|_| DecodeError::new("length does not fit in usize"))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.len()?;
        self.take(len)
    }

    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::new("string is not UTF-8"))
    }

    pub(crate) fn duration(&mut self) -> Result<Duration, DecodeError> {
        let secs = self.u64()?;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(DecodeError::new(format!(
                "duration has {nanos} sub-second nanoseconds"
            )));
        }
        Ok(Duration::new(secs, nanos))
    }

    pub(crate) fn opt_string(&mut self) -> Result<Option<String>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.string().map(Some),
            t => Err(DecodeError::new(format!("invalid option tag {t}"))),
        }
    }

    /// The bytes not read yet, ending the row there.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.buf
    }

    /// Ends the row: trailing bytes mean it was not written by this encoder.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::new(format!(
                "{} trailing bytes after the row",
                self.buf.len()
            )))
        }
    }
}

/// Decodes a fixed-width big-endian key; big-endian so that byte order in a
/// sorted store matches numeric order.
pub(crate) fn key_array<const N: usize>(key: &[u8]) -> Result<[u8; N], DecodeError> {
    key.try_into()
        .map_err(|_| DecodeError::new(format!("key has {} bytes, expected {N}", key.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let mut e = Encoder::new(3);
        e.u8(7)
            .bool(true)
            .u32(0xdead_beef)
            .u64(u64::MAX)
            .bytes(b"\x00\x01")
            .str("héllo")
            .duration(Duration::new(5, 999_999_999))
            .opt_str(None)
            .opt_str(Some("x"));
        let bytes = e.finish();
        let mut d = Decoder::new(&bytes, 3).unwrap();
        assert_eq!(d.u8().unwrap(), 7);
        assert!(d.bool().unwrap());
        assert_eq!(d.u32().unwrap(), 0xdead_beef);
        assert_eq!(d.u64().unwrap(), u64::MAX);
        assert_eq!(d.bytes().unwrap(), b"\x00\x01");
        assert_eq!(d.string().unwrap(), "héllo");
        assert_eq!(d.duration().unwrap(), Duration::new(5, 999_999_999));
        assert_eq!(d.opt_string().unwrap(), None);
        assert_eq!(d.opt_string().unwrap(), Some("x".to_owned()));
        d.finish().unwrap();
    }

    #[test]
    fn huge_length_prefix_is_an_error_not_an_allocation() {
        let mut e = Encoder::new(1);
        e.u32(u32::MAX);
        let bytes = e.finish();
        let mut d = Decoder::new(&bytes, 1).unwrap();
        assert!(d.bytes().is_err());
    }

    #[test]
    fn wrong_version_and_trailing_bytes_are_errors() {
        assert!(Decoder::new(&[2], 1).is_err());
        assert!(Decoder::new(&[], 1).is_err());
        let d = Decoder::new(&[1, 0], 1).unwrap();
        assert!(d.finish().is_err());
    }
}
