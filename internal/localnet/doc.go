// Package localnet runs an embedded NATS super-cluster, one server per
// region, whose gateway links pass through fault-injecting proxies.
//
// It backs `tallyd local` (one process running regions us, eu and ap) and
// the integration and chaos tests that cut and heal the links between
// regions.
//
// # Usage
//
//	cfg := localnet.DefaultConfig() // regions us, eu, ap
//	cfg.Dir = dir
//	c, err := localnet.Start(ctx, cfg)
//	if err != nil { ... }
//	defer c.Close()
//	nc, err := nats.Connect(c.ClientURL("eu"))
//	...
//	c.SetLink("us", "eu", false) // partition us from eu, both ways
//	c.SetLink("us", "eu", true)  // heal
//	err = c.WaitConnected(ctx)   // gateways back
//
// # Topology
//
// Each region runs one nats-server with JetStream, named after the region:
// the region name is the server name, the NATS cluster name and the gateway
// name. The servers form a super-cluster: every server keeps an outbound
// gateway connection to every other region and accepts one from each.
// NATS gateways are a full mesh without transit, so cutting the link
// between us and eu really separates them even while both still reach ap.
//
// Every gateway connection into a region passes through that region's
// ingress, a listener owned by localnet that forwards to the server's real
// gateway port:
//
//	us ──outbound──▶ [eu ingress] ──▶ eu real gateway port
//	eu ──outbound──▶ [us ingress] ──▶ us real gateway port
//
// The ingress reads the first protocol line the dialer sends, its CONNECT,
// which names the dialer's gateway, so it knows which link a connection
// belongs to; both connections between us and eu (one per direction) then
// share the fault state of the link us–eu. Cluster.SetLink cuts or heals a
// link, Cluster.SetDrop discards the bytes travelling one way, and
// Cluster.SetLatency delays them.
//
// # Making a cut airtight
//
// A server learns gateway addresses from more than its configuration: the
// INFO of every gateway it dials lists the URLs of that gateway, the INFO
// of every gateway that dials it is used to solicit back, and servers
// gossip the URLs they know of third regions to the servers that connect
// to them. With naive per-link proxies in front of the real ports a server
// would learn the real port of its peer, or another pair's proxy, and after
// a cut reconnect around the proxy. localnet closes every such path:
//
//   - Gateway.Advertise of each server is its ingress address, so the
//     INFO it sends (GatewayURL and GatewayURLs) names only the ingress.
//     Single-node clusters have no routes that could add other URLs.
//   - The configured remote of each region is that region's ingress
//     address. Hence every URL a server can ever hold for a region,
//     configured, advertised or gossiped, is the one ingress of that region
//     (the tests check the URL lists in Varz).
//   - Because the ingress identifies the link from the dialer's CONNECT
//     rather than from the address dialed, a URL learned through any other
//     server still maps to the right link.
//   - Gateway.RejectUnknown makes servers refuse gateways, and ignore
//     gossip about gateways, that are not among the configured regions.
//
// A cut closes the link's connections at once. A reconnection attempt
// accepted while every link it can belong to is cut (every region whose
// outbound gateway into the region is not carried has its link cut) is
// held: the ingress does not even dial the server, so the dialer, waiting
// for an INFO that nats-server awaits without a deadline, neither
// registers nor retries, and when a link heals the attempt goes through at
// once (Cluster.Held counts them). Without the hold the dialer would wait
// nats-server's fixed second between reconnection attempts after the heal.
// An attempt that is not held is relayed only until the dialer's CONNECT
// arrives, and closed there if its link is cut: the CONNECT is never
// forwarded, so the accepting server never registers the dialer. The
// dialer, however, has received the acceptor's INFO and registers an
// outbound connection for the instant before the close; so while a link
// is cut NumOutboundGateways may flicker, but the inbound side never does
// and no byte of the dialer reaches the other server, so no message or
// interest crosses (LinkState.Rejected counts these attempts).
//
// # JetStream
//
// The super-cluster is one JetStream domain (the empty default) with one
// meta group whose peers are the regions' servers; each region is a NATS
// cluster of one, so its name is a placement target. Clustered JetStream
// requires a configured route: each server's only route leads (through a
// forwarder owned by localnet, because the cluster port is random) back
// to itself, which the server detects and drops. That route also makes
// the meta group expect 1 + (regions-1) peers.
//
// Assets are placed in a region with Placement{Cluster: region}, and any
// client in any region uses them by name with the plain JetStream API (no
// domain): requests cross the gateways to the meta leader or the asset's
// leader. For example a stream of events created in us with Placement
// {Cluster: "us"} is consumed from eu by a durable consumer created by an
// eu client (the consumer lives with the stream, in us), or sourced into
// an eu stream; a KV bucket created with Placement{Cluster: "us"} is a
// single-replica, hence linearizable, store reachable from every region
// through the gateways (and unreachable from a region cut off from us).
//
// Giving each region its own JetStream domain does not work in a
// super-cluster: servers ignore the JetStream state of servers in other
// domains, so the meta leader never sees the other regions and cannot
// place anything there.
//
// Consequences: creating or deleting assets needs the meta group's quorum
// (a majority of the regions connected to each other), while reading and
// writing an existing single-replica asset only needs its region to be
// reachable. A cut shorter than a raft election timeout (4 to 9 s) leaves
// the meta leader alone; a longer one may move it.
//
// Start waits for the gateways and then for a meta leader that sees every
// region. The servers' first campaign usually runs before the gateways
// are connected (gateways are solicited a second after start, a delay
// localnet cannot change without touching nats-server's process-wide
// settings), so the first election often waits out an election timeout:
// Start takes from about 1 s to about 10 s.
//
// With a single region there are no gateways, no cluster and no proxies:
// the server runs standalone JetStream and starts in well under a second.
//
// # Proxy
//
// Proxy is the same fault injection as a stand-alone TCP proxy in front of
// one target, for harnesses that need to cut other connections (clients to
// servers, say).
//
// Every goroutine has an owner: the Cluster or Proxy that started it
// tracks it and Close waits for it. There is no package-level state.
package localnet
