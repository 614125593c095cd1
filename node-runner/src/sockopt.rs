//! Socket options on the runtime's TCP streams (monoio's `TcpStream` has
//! only `set_nodelay`): one borrowed-fd step for every option the Node sets,
//! and what the kernel allows of them.

use std::os::fd::AsRawFd;

use monoio::net::TcpStream;

/// Runs `f` with `stream`'s socket, for its options (`socket2`).
#[allow(unsafe_code)] // borrowing the raw fd; see the SAFETY note
pub(crate) fn with_socket<R>(stream: &TcpStream, f: impl FnOnce(socket2::SockRef<'_>) -> R) -> R {
    use std::os::fd::BorrowedFd;
    // SAFETY: the descriptor is `stream`'s, open for as long as `stream` is
    // borrowed, and the borrowed fd does not outlive this call (`f` gets a
    // reference that cannot leave it). Tested by the link's
    // `transport_tests` (`TCP_NOTSENT_LOWAT`) and
    // `provider_http::buffer_tests::a_receive_buffer_reaches_the_provider_socket`
    // (`SO_RCVBUF`, read back).
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    f(socket2::SockRef::from(&fd))
}

/// The most `SO_RCVBUF` the kernel grants an unprivileged socket
/// (`net.core.rmem_max`, bytes); `None` where it cannot be read.
pub fn receive_buffer_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()
        .and_then(|text| text.trim().parse().ok())
}
