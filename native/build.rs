//! Records which sources this build was made from: `contracts._wire.SOURCES` is the xxh3-64
//! digest of every file under `src/` (sorted by name; each one's name, a NUL, its bytes, a NUL).
//! A checkout holding `native/` computes the same digest of its own `src/` on import
//! (`contracts/failure_cluster.py`) and refuses a build of other sources by name, so an
//! editable install whose Rust side was not rebuilt after a change fails at once, saying so,
//! instead of answering with the previous code.

use std::fs;
use std::path::Path;

fn main() {
    let src = Path::new("src");
    println!("cargo:rerun-if-changed=src");
    let mut names: Vec<String> = fs::read_dir(src)
        .expect("native/src is readable")
        .map(|entry| entry.expect("a directory entry of native/src").file_name())
        .map(|name| {
            name.into_string()
                .expect("native/src holds UTF-8 file names")
        })
        .collect();
    names.sort();
    let mut hashed: Vec<u8> = Vec::new();
    for name in &names {
        hashed.extend_from_slice(name.as_bytes());
        hashed.push(0);
        hashed.extend(fs::read(src.join(name)).expect("a file of native/src is readable"));
        hashed.push(0);
    }
    let digest = xxhash_rust::xxh3::xxh3_64(&hashed);
    println!("cargo:rustc-env=SPECTRAL_WIRE_SOURCES={digest:016x}");
}
