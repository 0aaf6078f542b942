//! The control-frame decoder on arbitrary bytes returns envelopes or errors,
//! never panics.
//!
//! Frames arrive from other processes over QUIC, so every byte is untrusted.
//! The first input byte picks how the rest is cut into reads (a stream may
//! deliver a frame in any pieces); the decoder keeps going after an error so
//! one input exercises many frames.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ray_transport::frame::{decode_archive, FrameDecoder};
use rkyv::util::AlignedVec;

/// Small, so a hostile length prefix costs the fuzzer little memory.
const MAX_FRAME_LEN: u32 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1);

    let mut decoder = FrameDecoder::new(MAX_FRAME_LEN);
    for mut piece in data.chunks(chunk) {
        while decoder.decode_from(&mut piece).is_some() {}
    }
    let _ = decoder.end_of_stream();

    // The whole input as one archive, aligned as a receive buffer is.
    let mut aligned = AlignedVec::<16>::with_capacity(data.len());
    aligned.extend_from_slice(data);
    let _ = decode_archive(&aligned);
});
