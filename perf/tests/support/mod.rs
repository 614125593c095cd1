//! Shared set-up of the perf integration tests that drive Node-side code
//! against the in-process mock provider.

#![allow(dead_code)] // each test binary uses a different subset

use std::future::Future;

pub(crate) mod process;
pub(crate) mod stack;

use framing::io_driver::IoDriver;
use node_runner::provider_http::BaseUrl;
use node_runner::runtime::block_on;
use perf::mock_provider::{MockConfig, MockThreads, serve_threads};

/// Runs `test` on an epoll runtime, then on an io_uring runtime (set up as
/// the Node's are) when the kernel allows it.
pub(crate) fn each_driver<Fut: Future<Output = ()>>(test: impl Fn() -> Fut) {
    block_on(IoDriver::Epoll, test()).expect("epoll runtime");
    if monoio::utils::detect_uring() {
        block_on(IoDriver::Uring, test()).expect("io_uring runtime");
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
