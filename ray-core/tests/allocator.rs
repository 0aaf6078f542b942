//! A runtime keeps object-sized blocks in glibc's heap (`tune_allocator`).
//! Its own test binary: the check needs a process whose allocator nothing
//! else has tuned.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

use ray_core::Config;

/// Blocks glibc's malloc currently serves from mappings of their own.
fn mapped_blocks() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    unsafe { libc::mallinfo2() }.hblks
}

fn allocate(len: usize) -> Vec<u8> {
    std::hint::black_box(vec![1u8; len])
}

#[test]
fn after_init_a_16_mib_block_comes_from_the_heap_not_a_mapping_of_its_own() {
    // glibc's default, as this process starts: 4 MiB gets its own mapping
    // (freeing it raises the threshold to 4 MiB, not to 16).
    let before = mapped_blocks();
    let v = allocate(4 << 20);
    assert_eq!(mapped_blocks(), before + 1, "glibc's default changed");
    drop(v);

    let ray = ray_core::init_blocking(Config {
        num_cpus: Some(1.0),
        ..Config::default()
    })
    .expect("runtime starts");
    let before = mapped_blocks();
    let v = allocate(16 << 20);
    let during = mapped_blocks();
    drop(v);
    assert_eq!(during, before, "a 16 MiB block got a mapping of its own");
    // Objects of 32 MiB and more still do (they are unmapped when freed).
    let v = allocate(40 << 20);
    assert_eq!(mapped_blocks(), before + 1);
    drop(v);
    ray.shutdown();
}
