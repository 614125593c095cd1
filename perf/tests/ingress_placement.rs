//! Client connections are served on the core of the node's link while it
//! serves fewer than the slack (`edge_proxy::ingress::placement`): the
//! Edge's two cores each accept on their own listener, and one node's link
//! lives on one of them.

use std::io::Write;
use std::net::TcpStream;

use edge_proxy::ingress::placement::DEFAULT_LINK_CORE_SLACK;

mod support;
use support::stack::*;

/// `n` client connections, each answered once (so each is being served).
fn served_connections(stack: &Stack, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut client = TcpStream::connect(stack.edge.ingress_addr).unwrap();
            client
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            client
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
                .unwrap();
            let mut head = [0u8; 12];
            let mut got = 0;
            while got < head.len() {
                match read_some(&mut client, &mut head[got..]).unwrap() {
                    0 => panic!("closed before an answer"),
                    n => got += n,
                }
            }
            assert_eq!(&head, b"HTTP/1.1 200");
            client
        })
        .collect()
}

fn counted(stack: &Stack) -> [usize; 2] {
    [stack.edge.placement.open(0), stack.edge.placement.open(1)]
}

#[test]
fn client_connections_go_to_the_link_core_within_the_slack() {
    for driver in drivers() {
        let stack = Stack::start(driver, "placement");
        let link = stack.edge.registry.sole_link_core().expect("one node");
        assert_eq!(stack.edge.workers, 2);

        // Within the slack, every connection is served on the link core,
        // wherever the kernel queued it.
        let clients = served_connections(&stack, 8);
        wait_until("8 connections counted", || {
            counted(&stack).iter().sum::<usize>() == 8
        });
        assert_eq!(
            counted(&stack)[link],
            8,
            "{:?} (link core {link})",
            counted(&stack)
        );
        drop(clients);
        wait_until("closed connections uncounted", || counted(&stack) == [0, 0]);

        // Past it, connections stay where they were accepted: of half the
        // slack more, the kernel queues some on the other core.
        let n = DEFAULT_LINK_CORE_SLACK + DEFAULT_LINK_CORE_SLACK / 2;
        let clients = served_connections(&stack, n);
        wait_until("every connection counted", || {
            counted(&stack).iter().sum::<usize>() == n
        });
        let [on_link, elsewhere] = [counted(&stack)[link], counted(&stack)[1 - link]];
        assert!(
            on_link >= DEFAULT_LINK_CORE_SLACK && elsewhere > 0,
            "{on_link} on the link core, {elsewhere} elsewhere"
        );
        drop(clients);
        wait_until("closed connections uncounted", || counted(&stack) == [0, 0]);
    }
}

#[test]
fn slack_zero_serves_each_connection_where_it_was_accepted() {
    for driver in drivers() {
        let mut stack = Stack::start_edge_with(driver, "placement-off", config, |options| {
            options.link_core_slack = 0;
        });
        stack.start_node();
        assert!(stack.edge.registry.sole_link_core().is_some());
        let clients = served_connections(&stack, 32);
        wait_until("32 connections counted", || {
            counted(&stack).iter().sum::<usize>() == 32
        });
        // The kernel spreads 32 connections over both listeners (all on
        // one has odds of 2 in 2^32).
        let [zero, one] = counted(&stack);
        assert!(zero > 0 && one > 0, "{zero} / {one}");
        drop(clients);
    }
}
