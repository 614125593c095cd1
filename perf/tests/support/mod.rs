//! Shared set-up of the perf integration tests that drive Node-side code
//! against the in-process mock provider.

#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;

pub(crate) mod process;
pub(crate) mod stack;

use node_runner::provider_http::BaseUrl;
use perf::mock_provider::{MockConfig, MockThreads, serve_threads};

/// Runs `test` on an epoll runtime, then on an io_uring runtime when the
/// kernel allows it.
pub(crate) fn each_driver<Fut: Future<Output = ()>>(test: impl Fn() -> Fut) {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("epoll runtime")
        .block_on(test());
    if monoio::utils::detect_uring() {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build()
            .expect("io_uring runtime")
            .block_on(test());
    }
}

/// Starts the mock provider on a free loopback port (one thread); keep the
/// returned handle alive for as long as the test uses it.
pub(crate) fn start() -> (MockThreads, BaseUrl) {
    let mock = serve_threads("127.0.0.1:0".parse().unwrap(), MockConfig::default(), 1)
        .expect("mock provider starts");
    let base = BaseUrl::parse(&format!("http://{}", mock.local_addr())).unwrap();
    (mock, base)
}
