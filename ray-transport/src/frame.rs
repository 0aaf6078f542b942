//! Length-prefixed frames of archived [`Envelope`]s.
//!
//! A frame is a `u32` little-endian length followed by that many bytes: the
//! rkyv archive of one [`Envelope`]. The receiver copies the archive into a
//! 16-byte-aligned buffer and validates it with bytecheck before
//! deserializing, and rejects a length over its limit before allocating
//! anything, so a malformed, truncated or hostile frame is an [`FrameError`],
//! never a panic.
//!
//! This module is sans-IO: [`encode`] makes the bytes to send, and
//! [`FrameDecoder`] turns bytes read from anywhere into envelopes.
//!
//! ```
//! use ray_transport::frame::{encode, FrameDecoder, DEFAULT_MAX_FRAME_LEN};
//! use ray_transport::{Envelope, Message};
//!
//! let sent = Envelope::new(Message::Ping { seq: 7 });
//! let bytes = encode(&sent, DEFAULT_MAX_FRAME_LEN)?;
//!
//! let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
//! let mut input = &bytes[..];
//! let received = decoder.decode_from(&mut input).expect("one whole frame")?;
//! assert_eq!(received, sent);
//! # Ok::<(), ray_transport::FrameError>(())
//! ```

use ray_proto::wire::{Envelope, PROTOCOL_VERSION};
use rkyv::rancor;
use rkyv::util::AlignedVec;

/// The default limit on one frame's archive: 64 MiB.
///
/// Control messages are small; large objects travel on their own streams.
pub const DEFAULT_MAX_FRAME_LEN: u32 = 64 << 20;

/// Bytes of the length prefix.
pub const LEN_PREFIX: usize = 4;

/// A receive buffer that grew past this is given back after its frame, so
/// one large message does not pin its memory for the connection's life.
const KEEP_CAPACITY: usize = 1 << 20;

/// Why a frame could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix (or an outgoing archive) exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The length announced; for an outgoing envelope, the bytes it
        /// needed when encoding stopped at the limit (at least this many).
        len: u64,
        /// The limit in force.
        max: u32,
    },
    /// The archive failed bytecheck validation.
    #[error("frame failed validation: {0}")]
    Invalid(#[source] rancor::Error),
    /// The archive is a valid envelope of another protocol version.
    #[error("frame speaks protocol {got}, this build speaks {expected}")]
    VersionMismatch {
        /// The version in the envelope.
        got: u16,
        /// [`PROTOCOL_VERSION`].
        expected: u16,
    },
    /// The stream ended inside a frame.
    #[error("stream ended {got} bytes into a {len}-byte frame")]
    Truncated {
        /// Bytes of the frame (prefix included) that arrived.
        got: usize,
        /// Bytes the frame should have had (prefix included; the prefix
        /// length while the prefix itself was incomplete).
        len: usize,
    },
    /// The envelope could not be archived.
    #[error("cannot encode frame: {0}")]
    Encode(#[source] rancor::Error),
}

/// The frame (length prefix and archive) of `envelope`.
///
/// # Errors
///
/// [`FrameError::TooLarge`] if the archive exceeds `max_frame_len`;
/// [`FrameError::Encode`] if rkyv fails.
pub fn encode(envelope: &Envelope, max_frame_len: u32) -> Result<Vec<u8>, FrameError> {
    encode_sized(envelope, max_frame_len, 0)
}

/// As [`encode`], with room for an archive of `size_hint` bytes made up
/// front (a stream's frames tend to be alike: its last one's size is a good
/// hint), so the buffer is not grown and copied as the archive is written.
///
/// # Errors
///
/// As [`encode`].
pub fn encode_sized(
    envelope: &Envelope,
    max_frame_len: u32,
    size_hint: usize,
) -> Result<Vec<u8>, FrameError> {
    // The archive is written into a buffer that stops at the frame limit
    // (and below 2 GiB, where rkyv's 32-bit relative pointers would make
    // it panic): an envelope too large is an error found as soon as it is.
    let max = usize::try_from(max_frame_len)
        .unwrap_or(usize::MAX)
        .min(i32::MAX as usize);
    // The frame is written in place: the prefix's room first, then the
    // archive (the writer counts positions from the archive's start, which
    // is all rkyv's alignment depends on; the receiver copies the archive
    // into an aligned buffer), then the prefix filled in.
    let mut buf = Vec::with_capacity(LEN_PREFIX.saturating_add(size_hint.min(max)));
    buf.extend_from_slice(&[0; LEN_PREFIX]);
    let mut writer = Limited {
        buf,
        max,
        over: false,
        needed: 0,
    };
    if let Err(e) = rkyv::api::high::to_bytes_in::<_, rancor::Error>(envelope, &mut writer) {
        return Err(match writer.over {
            true => FrameError::TooLarge {
                len: writer.needed as u64,
                max: max_frame_len,
            },
            false => FrameError::Encode(e),
        });
    }
    let mut frame = writer.buf;
    let archived = frame.len() - LEN_PREFIX;
    let len = u32::try_from(archived)
        .ok()
        .filter(|&len| len <= max_frame_len)
        .ok_or(FrameError::TooLarge {
            len: archived as u64,
            max: max_frame_len,
        })?;
    frame[..LEN_PREFIX].copy_from_slice(&len.to_le_bytes());
    Ok(frame)
}

/// An rkyv writer of an archive after a frame's length prefix (`buf`
/// starts with the prefix's room) that refuses to grow the archive past
/// `max` bytes (it notes that it did, and how much the write needed).
struct Limited {
    buf: Vec<u8>,
    max: usize,
    over: bool,
    needed: usize,
}

impl rkyv::ser::Positional for Limited {
    fn pos(&self) -> usize {
        self.buf.len() - LEN_PREFIX
    }
}

impl<E: rancor::Source> rkyv::ser::Writer<E> for Limited {
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        let needed = (self.buf.len() - LEN_PREFIX).saturating_add(bytes.len());
        if needed > self.max {
            self.over = true;
            self.needed = needed;
            return Err(E::new(FrameTooLarge { needed }));
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }
}

/// The error [`Limited`] gives rkyv (the caller reports
/// [`FrameError::TooLarge`]).
#[derive(Debug)]
struct FrameTooLarge {
    needed: usize,
}

impl std::fmt::Display for FrameTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the frame needs at least {} bytes", self.needed)
    }
}

impl std::error::Error for FrameTooLarge {}

/// Validates and deserializes one archive (a frame without its prefix).
///
/// `archive` must start 16-byte aligned, as an [`AlignedVec`] does; a
/// misaligned buffer fails validation.
///
/// # Errors
///
/// [`FrameError::Invalid`] if bytecheck rejects the bytes,
/// [`FrameError::VersionMismatch`] if the envelope is of another version.
pub fn decode_archive(archive: &[u8]) -> Result<Envelope, FrameError> {
    let envelope =
        rkyv::from_bytes::<Envelope, rancor::Error>(archive).map_err(FrameError::Invalid)?;
    if envelope.version != PROTOCOL_VERSION {
        return Err(FrameError::VersionMismatch {
            got: envelope.version,
            expected: PROTOCOL_VERSION,
        });
    }
    Ok(envelope)
}

/// Turns a byte stream into [`Envelope`]s, one frame at a time.
///
/// Read into [`FrameDecoder::buf`], then report how many bytes arrived with
/// [`FrameDecoder::advance`]. The partial frame lives in the decoder, so a
/// read that is cancelled between the two loses nothing. After an error the
/// stream is out of step with the frames: close it.
#[derive(Debug)]
pub struct FrameDecoder {
    max_frame_len: u32,
    prefix: [u8; LEN_PREFIX],
    prefix_filled: usize,
    /// The archive being received, once the prefix is complete.
    archive: AlignedVec<16>,
    archive_filled: usize,
    in_archive: bool,
}

impl FrameDecoder {
    /// A decoder that refuses frames longer than `max_frame_len` bytes.
    pub fn new(max_frame_len: u32) -> Self {
        Self {
            max_frame_len,
            prefix: [0; LEN_PREFIX],
            prefix_filled: 0,
            archive: AlignedVec::new(),
            archive_filled: 0,
            in_archive: false,
        }
    }

    /// The limit this decoder enforces.
    pub fn max_frame_len(&self) -> u32 {
        self.max_frame_len
    }

    /// Where the next bytes of the stream go; never empty.
    ///
    /// Its length is what the current frame still needs, so a read into it
    /// never takes bytes of the next frame.
    pub fn buf(&mut self) -> &mut [u8] {
        if self.in_archive {
            &mut self.archive.as_mut_slice()[self.archive_filled..]
        } else {
            &mut self.prefix[self.prefix_filled..]
        }
    }

    /// Records that `n` bytes were written at the start of [`FrameDecoder::buf`];
    /// returns the envelope they completed, if any.
    ///
    /// # Errors
    ///
    /// [`FrameError::TooLarge`] as soon as a prefix announces too long a
    /// frame; [`FrameError::Invalid`] or [`FrameError::VersionMismatch`] for
    /// a complete archive that is not a valid envelope of this version.
    ///
    /// # Panics
    ///
    /// If `n` exceeds the length of the last [`FrameDecoder::buf`]: a bug in
    /// the caller, not something the peer can cause.
    pub fn advance(&mut self, n: usize) -> Result<Option<Envelope>, FrameError> {
        if self.in_archive {
            assert!(
                n <= self.archive.len() - self.archive_filled,
                "advance past the end of buf()"
            );
            self.archive_filled += n;
            if self.archive_filled < self.archive.len() {
                return Ok(None);
            }
            return self.finish_frame().map(Some);
        }
        assert!(
            n <= LEN_PREFIX - self.prefix_filled,
            "advance past the end of buf()"
        );
        self.prefix_filled += n;
        if self.prefix_filled < LEN_PREFIX {
            return Ok(None);
        }
        let len = u32::from_le_bytes(self.prefix);
        self.prefix_filled = 0;
        if len > self.max_frame_len {
            return Err(FrameError::TooLarge {
                len: u64::from(len),
                max: self.max_frame_len,
            });
        }
        self.archive.clear();
        self.archive.resize(len as usize, 0);
        self.archive_filled = 0;
        if len == 0 {
            // Nothing more to read: an empty archive is decoded (and rejected) now.
            return self.finish_frame().map(Some);
        }
        self.in_archive = true;
        Ok(None)
    }

    fn finish_frame(&mut self) -> Result<Envelope, FrameError> {
        self.in_archive = false;
        let result = decode_archive(&self.archive);
        if self.archive.capacity() > KEEP_CAPACITY {
            self.archive = AlignedVec::new();
        } else {
            self.archive.clear();
        }
        self.archive_filled = 0;
        result
    }

    /// True between frames: no byte of a next frame has arrived.
    pub fn is_idle(&self) -> bool {
        !self.in_archive && self.prefix_filled == 0
    }

    /// The error for a stream that ended now, if it ended inside a frame.
    pub fn end_of_stream(&self) -> Option<FrameError> {
        if self.in_archive {
            Some(FrameError::Truncated {
                got: LEN_PREFIX + self.archive_filled,
                len: LEN_PREFIX + self.archive.len(),
            })
        } else if self.prefix_filled > 0 {
            Some(FrameError::Truncated {
                got: self.prefix_filled,
                len: LEN_PREFIX,
            })
        } else {
            None
        }
    }

    /// Feeds bytes from `input` (advancing it past what was used) until one
    /// frame is complete; `None` when `input` ran out first.
    ///
    /// A convenience over [`FrameDecoder::buf`] and [`FrameDecoder::advance`]
    /// for bytes already in memory.
    pub fn decode_from(&mut self, input: &mut &[u8]) -> Option<Result<Envelope, FrameError>> {
        while !input.is_empty() {
            let buf = self.buf();
            let n = buf.len().min(input.len());
            buf[..n].copy_from_slice(&input[..n]);
            *input = &input[n..];
            match self.advance(n) {
                Ok(None) => {}
                Ok(Some(envelope)) => return Some(Ok(envelope)),
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ray_proto::wire::Message;

    fn ping(seq: u64) -> Envelope {
        Envelope::new(Message::Ping { seq })
    }

    #[test]
    fn frames_split_at_every_byte_still_decode() {
        let mut stream = encode(&ping(1), DEFAULT_MAX_FRAME_LEN).expect("encode");
        stream.extend(encode(&ping(2), DEFAULT_MAX_FRAME_LEN).expect("encode"));
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
        let mut got = Vec::new();
        for byte in &stream {
            let mut input = std::slice::from_ref(byte);
            if let Some(result) = decoder.decode_from(&mut input) {
                got.push(result.expect("valid frame"));
            }
        }
        assert_eq!(got, vec![ping(1), ping(2)]);
        assert!(decoder.is_idle());
    }

    #[test]
    fn oversize_prefix_is_rejected_before_the_body_arrives() {
        let mut decoder = FrameDecoder::new(1024);
        let mut input = &2048u32.to_le_bytes()[..];
        let err = decoder.decode_from(&mut input).expect("decided at once");
        assert!(matches!(
            err,
            Err(FrameError::TooLarge {
                len: 2048,
                max: 1024
            })
        ));
    }

    #[test]
    fn empty_and_garbage_archives_are_invalid() {
        let mut decoder = FrameDecoder::new(1024);
        let mut input = &0u32.to_le_bytes()[..];
        assert!(matches!(
            decoder.decode_from(&mut input),
            Some(Err(FrameError::Invalid(_)))
        ));
        let mut frame = 16u32.to_le_bytes().to_vec();
        frame.extend([0xff; 16]);
        let mut input = &frame[..];
        assert!(matches!(
            decoder.decode_from(&mut input),
            Some(Err(FrameError::Invalid(_)))
        ));
    }

    #[test]
    fn another_protocol_version_is_a_version_mismatch() {
        let mut env = ping(3);
        env.version = PROTOCOL_VERSION + 1;
        let frame = encode(&env, DEFAULT_MAX_FRAME_LEN).expect("encode");
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
        let mut input = &frame[..];
        assert!(matches!(
            decoder.decode_from(&mut input),
            Some(Err(FrameError::VersionMismatch { got, expected }))
                if got == PROTOCOL_VERSION + 1 && expected == PROTOCOL_VERSION
        ));
    }

    #[test]
    fn a_stream_ending_mid_frame_is_truncated() {
        let frame = encode(&ping(4), DEFAULT_MAX_FRAME_LEN).expect("encode");
        let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
        let mut input = &frame[..frame.len() - 1];
        assert!(decoder.decode_from(&mut input).is_none());
        assert!(matches!(
            decoder.end_of_stream(),
            Some(FrameError::Truncated { got, len }) if got + 1 == len
        ));
    }

    #[test]
    fn encode_refuses_a_frame_over_the_limit() {
        let env = Envelope::new(Message::Refused {
            reason: "x".repeat(100),
        });
        assert!(matches!(
            encode(&env, 64),
            Err(FrameError::TooLarge { max: 64, len }) if len > 64
        ));
        // Within the limit it encodes.
        assert!(encode(&env, 4096).is_ok());
    }

    #[test]
    fn a_size_hint_changes_nothing_but_the_room() {
        // An archive padded for alignment (a string's bytes out of line,
        // then the aligned root): a writer that counted the prefix in its
        // positions would write a frame that fails validation.
        let env = Envelope::new(Message::Refused {
            reason: "thirteen-char".into(),
        });
        let plain = encode(&env, DEFAULT_MAX_FRAME_LEN).expect("encode");
        for hint in [0, 1, 3, 17, 4096, 1 << 16] {
            let sized = encode_sized(&env, DEFAULT_MAX_FRAME_LEN, hint).expect("encode");
            assert_eq!(sized, plain, "hint {hint}");
            let mut decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_LEN);
            let mut input = &sized[..];
            let got = decoder
                .decode_from(&mut input)
                .expect("whole")
                .expect("valid");
            assert_eq!(got, env);
            assert!(input.is_empty());
        }
        // The limit holds whatever the hint, and counts the archive only:
        // an archive of exactly the limit is a frame, one byte less is not.
        assert!(matches!(
            encode_sized(&env, 8, usize::MAX),
            Err(FrameError::TooLarge { max: 8, .. })
        ));
        let archived = u32::try_from(plain.len() - LEN_PREFIX).expect("small");
        assert_eq!(
            encode_sized(&env, archived, 0).expect("at the limit"),
            plain
        );
        assert!(matches!(
            encode_sized(&env, archived - 1, usize::MAX),
            Err(FrameError::TooLarge { .. })
        ));
    }
}
