//! Checked rkyv access to ids from arbitrary bytes never panics.
//!
//! Ids arrive from other processes inside archived messages; `bytecheck`
//! validation must reject any malformed buffer with an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rkyv::rancor::Error;
use rkyv::util::AlignedVec;

fuzz_target!(|data: &[u8]| {
    // As received: possibly misaligned, which must be an error too.
    let _ = rkyv::access::<ray_proto::ArchivedObjectId, Error>(data);
    let _ = rkyv::from_bytes::<Vec<ray_proto::TaskId>, Error>(data);

    // Aligned, as a receive buffer would be, so validation gets past the
    // alignment check and looks at the contents.
    let mut aligned = AlignedVec::<16>::with_capacity(data.len());
    aligned.extend_from_slice(data);
    let _ = rkyv::access::<ray_proto::ArchivedObjectId, Error>(&aligned);
    let _ = rkyv::from_bytes::<Vec<ray_proto::TaskId>, Error>(&aligned);
});
