//! Accepting client connections: each core's accept loop, the sockets
//! other cores hand to it ([`placement`]), and the task that serves one
//! connection.

use std::rc::Rc;
use std::sync::Arc;

use monoio::net::{TcpListener, TcpStream};

use framing::timer::ClockSource;

use super::read_timer::{self, ReadTimers};
use super::{IngressShared, Router, http, placement};

/// Upper bound on one client connection's task, in bytes (checked in debug
/// builds). It lives as long as the connection, so every open stream pays
/// it: short steps (reading a request, admission, opening a run or tunnel,
/// each write) are boxed apart, and no argument or moved-out request is
/// laid out twice (see `http::serve`); no event or routing local is held
/// across the answer (see `Router::route`, `normalized::stream_events`) and
/// the rare stall tail and error answers are boxed; the task is
/// `http::serve`'s future (boxed once, beside its placement count:
/// [`placement::Counted`]), and no task watches the client beside it
/// (`client_read`). Measured: 2,112 B in release builds (2,336 B while
/// captured and moved-out values kept their slots; 3,440 B before those;
/// 4,736 B, 128-byte aligned, before the boxing; 3,912 B with the
/// duplicates).
const CONNECTION_TASK_BUDGET: usize = 3 * 1024;

/// Serves client connections accepted on `listener`, or handed to this core
/// by another ([`placement`]), until a drain begins, then closes the
/// listener (new connections are refused; open ones keep being served).
/// Call inside a monoio runtime (one per core).
pub async fn serve_core(
    core_id: usize,
    listener: TcpListener,
    shared: Arc<IngressShared>,
    handoffs: placement::Handoffs,
) {
    // Request reads are bounded on this core's wheel, in real time
    // (`read_timer`), as they were by monoio's timers.
    let read_timers = ReadTimers::new(&ClockSource::Coarse, read_timer::TICK_MS);
    monoio::spawn(Rc::clone(&read_timers).run(monoio::time::sleep));
    let router = Rc::new(Router {
        shared,
        read_timers,
    });
    let drain = Arc::clone(&router.shared.drain);
    // Its own task: an accept is not dropped half-done for a hand-off.
    monoio::spawn(take_handoffs(core_id, handoffs, Rc::clone(&router)));
    loop {
        let accepted = monoio::select! {
            accepted = listener.accept() => accepted,
            () = drain.wait() => break,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let placement = &router.shared.placement;
                let link_core = || router.shared.registry.sole_link_core();
                let kept = match placement.hand_to(core_id, link_core) {
                    Some(core) => placement.hand_off(core, stream),
                    None => Some(stream),
                };
                if let Some(stream) = kept {
                    serve_connection(core_id, stream, &router);
                }
            }
            Err(error) => {
                tracing::warn!(core = core_id, %error, "ingress accept failed");
                monoio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    tracing::debug!(core = core_id, "ingress listener closed for the drain");
}

/// Serves the connections other cores hand to this one, until a drain
/// begins (then they keep what they accept).
async fn take_handoffs(core_id: usize, mut handoffs: placement::Handoffs, router: Rc<Router>) {
    let drain = Arc::clone(&router.shared.drain);
    let take = |socket| match TcpStream::from_std(socket) {
        Ok(stream) => serve_connection(core_id, stream, &router),
        Err(error) => {
            tracing::warn!(core = core_id, %error, "a handed-off client connection failed");
        }
    };
    loop {
        let handed = monoio::select! {
            handed = handoffs.recv() => handed,
            () = drain.wait() => break,
        };
        let Some(socket) = handed else { return };
        take(socket);
    }
    // Those already sent are served (their requests get the drain's 503).
    handoffs.close();
    while let Ok(socket) = handoffs.try_recv() {
        take(socket);
    }
}

/// Spawns the task serving one client connection on this core, counted
/// there while it lives.
fn serve_connection(core_id: usize, stream: TcpStream, router: &Rc<Router>) {
    let connection = http::serve(
        stream,
        router.shared.limits,
        Rc::clone(router),
        &router.read_timers,
    );
    debug_assert!(
        std::mem::size_of_val(&connection) <= CONNECTION_TASK_BUDGET,
        "a connection's task grew to {} B: box the new step (see http::serve)",
        std::mem::size_of_val(&connection)
    );
    monoio::spawn(placement::Counted::new(
        connection,
        router.shared.placement.serving(core_id),
    ));
}
