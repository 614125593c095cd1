//! Runs the fuzz entry points (`framing::fuzzing`) on the stable toolchain:
//! over the committed seed corpus in `framing/fuzz/corpus/<target>/` and over
//! proptest-generated arbitrary bytes. `hack/fuzz.sh` runs the same entry
//! points under libFuzzer for coverage-guided fuzzing.

use std::path::Path;

use proptest::prelude::*;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(target);
    let mut inputs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            inputs.push(std::fs::read(entry.path()).expect("read seed"));
        }
    }
    inputs
}

#[test]
fn frame_decoder_seed_corpus() {
    let seeds = corpus("frame_decoder");
    assert!(!seeds.is_empty(), "framing/fuzz/seeds/frame_decoder is empty");
    for seed in seeds {
        framing::fuzzing::frame_decoder(&seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn frame_decoder_arbitrary(data in proptest::collection::vec(any::<u8>(), 0..8192)) {
        framing::fuzzing::frame_decoder(&data);
    }
}
