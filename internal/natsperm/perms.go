// Package natsperm is the one source of the NATS users of a tally
// deployment and what each may do: the shipped configs/nats/*.conf are
// rendered from it (TestShippedConfs fails when a checked-in file differs;
// `go test ./internal/natsperm -run TestShippedConfs -update` rewrites
// them, and `go test ./internal/deploytest -run TestK8sManifests -update`
// copies them into deploy/k8s/overlays) and `tallyd local` gives its servers the
// same users, so the tests
// and the default deployment exercise one permission model
// (docs/architecture.md, "NATS permissions: what a region may do").
//
// Four kinds of users share the TALLY account:
//
//   - one per replica: its own replication subjects, its region's event
//     stream, reads of the allocator's bucket and of the milestone
//     stream, reads and watches of the shard map bucket; no stream
//     administration, no other client's replies;
//   - tally-authority, the lease authority: the only writer of the
//     allocator's bucket and of milestones, which checks every replica's
//     write (alloc.Authority);
//   - tally-apps, the applications: durable consumers on the milestone
//     stream and the event streams, nothing that writes tally's data;
//   - tally-admin, the operator: everything (bootstrap, retire, updates
//     of stream limits, the shard maps: `tallyd admin shards assign`).
package natsperm

import (
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/route"
)

// Rule is a group of subjects, with why they are granted.
type Rule struct {
	Why      string
	Subjects []string
}

// Perms is one user's permissions: deny by default, these allowed.
type Perms struct {
	Publish, Subscribe []Rule
	// AllowResponses lets the user answer requests it received (on the
	// requester's reply subject, once each).
	AllowResponses bool
}

// User is one NATS user of the deployment.
type User struct {
	Name string
	// PasswordEnv is the environment variable the shipped configs read
	// its password from.
	PasswordEnv string
	// Perms is nil for a user allowed everything (the admin).
	Perms *Perms
}

// Names of the shared users.
const (
	AppsUser      = "tally-apps"
	AdminUser     = "tally-admin"
	AuthorityUser = "tally-authority" // node.AuthorityUser
)

// ReplicaUser is the NATS user name of replica.
func ReplicaUser(replica string) string { return "tally-" + replica }

// envName makes s part of an environment variable name.
func envName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s)
}

// jsAPI is a JetStream API subject.
func jsAPI(op string) string { return "$JS.API." + op }

// kvStream is the allocator bucket's stream.
const kvStream = "KV_" + alloc.DefaultBucket

// shardsStream is the shard map bucket's stream.
const shardsStream = "KV_" + node.ShardsBucket

// Replica is what replica of region may do: exactly what its node uses.
func Replica(region, replica string) Perms {
	events := replication.EventsStream(region)
	ms := milestone.DefaultStream
	return Perms{
		Publish: []Rule{
			{"its own fast path and identity announcements only", []string{
				replication.DeltaSubject(region, replica), replication.DeltaShardSubjects(region, replica), replication.IDSubject(replica)}},
			{"anti-entropy requests to any peer; answers go to its own inbox", replication.AERequestSubjects()},
			{"milestones: leases and claims are written by the lease authority, which checks each (the replica may not write the allocator's bucket nor publish a milestone)", []string{
				alloc.AuthoritySubject(replica)}},
			{"the allocator's bucket and the milestone stream: create once (identical configs only: a create never changes an existing stream), look up, read by message; no update, delete, purge or consumer", []string{
				jsAPI("INFO"),
				jsAPI("STREAM.INFO." + kvStream), jsAPI("STREAM.CREATE." + kvStream),
				jsAPI("STREAM.MSG.GET." + kvStream), jsAPI("DIRECT.GET." + kvStream + ".>"),
				jsAPI("STREAM.INFO." + ms), jsAPI("STREAM.CREATE." + ms),
				jsAPI("STREAM.MSG.GET." + ms), jsAPI("DIRECT.GET." + ms + ".>")}},
			{"requests forwarded to another replica of its own region (a shard's holder, or every replica for a gathered read); answers come back to its own inbox", []string{route.SendSubjects(region)}},
			{"the shard map bucket: look up, read, and watch with ordered consumers of its own (create, delete, flow control); no create, write or purge: the operator assigns the maps", []string{
				jsAPI("STREAM.INFO." + shardsStream),
				jsAPI("STREAM.MSG.GET." + shardsStream), jsAPI("DIRECT.GET." + shardsStream + ".>"),
				jsAPI("CONSUMER.CREATE." + shardsStream), jsAPI("CONSUMER.CREATE." + shardsStream + ".>"),
				jsAPI("CONSUMER.DELETE." + shardsStream + ".>"), "$JS.FC." + shardsStream + ".>"}},
			{"the event log: its own events, to its region's stream, created once, never updated", []string{
				replication.EventsSubject(region, replica),
				jsAPI("STREAM.INFO." + events), jsAPI("STREAM.CREATE." + events)}},
		},
		AllowResponses: true,
		Subscribe: []Rule{
			{"every replica's deltas, all regions", []string{"tally.delta.>"}},
			{"anti-entropy requests and identity announcements for its own id only, so nobody else can answer in its name", []string{
				replication.AERequestPrefix(replica) + ".>", replication.IDSubject(replica)}},
			{"a wake-up when a milestone is published (the stream is then read by message)", []string{"tally.milestone.>"}},
			{"requests forwarded to it alone: no replica can read or answer another's (no queue group is shared)", []string{route.Subject(region, replica)}},
			{"replies to its own requests only (nats.CustomInboxPrefix): never _INBOX.>, where other clients' replies pass", []string{
				replication.InboxPrefix(replica) + ".>"}},
		},
	}
}

// Authority is what the lease authority (`tallyd lease-authority`) may
// do: write the allocator's bucket and publish milestones, answering the
// replicas' requests.
func Authority() Perms {
	ms := milestone.DefaultStream
	return Perms{
		Publish: []Rule{
			{"the only writer of the allocator's bucket and of milestones", []string{
				"$KV." + alloc.DefaultBucket + ".>", "tally.milestone.>"}},
			{"the bucket and the milestone stream: create, look up, read", []string{
				jsAPI("INFO"),
				jsAPI("STREAM.INFO." + kvStream), jsAPI("STREAM.CREATE." + kvStream),
				jsAPI("STREAM.MSG.GET." + kvStream), jsAPI("DIRECT.GET." + kvStream + ".>"),
				jsAPI("STREAM.INFO." + ms), jsAPI("STREAM.CREATE." + ms),
				jsAPI("STREAM.MSG.GET." + ms), jsAPI("DIRECT.GET." + ms + ".>")}},
		},
		AllowResponses: true,
		Subscribe: []Rule{
			{"the replicas' write requests; the subject names the writer", []string{alloc.AuthoritySubjectPrefix + "*"}},
			{"replies to its own requests only", []string{replication.InboxPrefix(AuthorityUser) + ".>"}},
		},
	}
}

// Apps is what applications may do: follow the milestone stream and the
// event streams of regions with durable consumers of their own.
func Apps(regions []string) Perms {
	streams := []string{milestone.DefaultStream}
	for _, r := range regions {
		streams = append(streams, replication.EventsStream(r))
	}
	var read []string
	for _, s := range streams {
		read = append(read,
			jsAPI("STREAM.INFO."+s), jsAPI("STREAM.MSG.GET."+s), jsAPI("DIRECT.GET."+s+".>"),
			jsAPI("CONSUMER.CREATE."+s), jsAPI("CONSUMER.CREATE."+s+".>"), jsAPI("CONSUMER.DURABLE.CREATE."+s+".>"),
			jsAPI("CONSUMER.INFO."+s+".>"), jsAPI("CONSUMER.DELETE."+s+".>"), jsAPI("CONSUMER.MSG.NEXT."+s+".>"),
			"$JS.ACK."+s+".>", "$JS.FC."+s+".>")
	}
	return Perms{
		Publish: []Rule{
			{"JetStream account info", []string{jsAPI("INFO")}},
			{"read the milestone and event streams with consumers (applications share them: one application can touch another's consumer, no replica can)", read},
		},
		Subscribe: []Rule{
			{"replies and consumer deliveries", []string{"_INBOX.>"}},
		},
	}
}

// Users are the users of region's servers: its replicas, the applications
// and the admin. regions lists every region (applications read every
// region's event stream).
func Users(region string, replicas, regions []string) []User {
	var out []User
	for _, rep := range replicas {
		p := Replica(region, rep)
		out = append(out, User{Name: ReplicaUser(rep), PasswordEnv: "TALLY_" + envName(rep) + "_NATS_PASSWORD", Perms: &p})
	}
	apps, auth := Apps(regions), Authority()
	out = append(out,
		User{Name: AuthorityUser, PasswordEnv: "TALLY_AUTHORITY_NATS_PASSWORD", Perms: &auth},
		User{Name: AppsUser, PasswordEnv: "TALLY_APPS_NATS_PASSWORD", Perms: &apps},
		User{Name: AdminUser, PasswordEnv: "TALLY_ADMIN_NATS_PASSWORD"})
	return out
}

func flat(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Subjects...)
	}
	return out
}

// Server is p as nats-server permissions.
func (p *Perms) Server() *server.Permissions {
	if p == nil {
		return nil
	}
	sp := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: flat(p.Publish)},
		Subscribe: &server.SubjectPermission{Allow: flat(p.Subscribe)},
	}
	if p.AllowResponses {
		sp.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return sp
}

// ServerUsers are users as nats-server users with the given passwords
// (by user name), for an embedded server.
func ServerUsers(users []User, passwords map[string]string) []*server.User {
	out := make([]*server.User, 0, len(users))
	for _, u := range users {
		out = append(out, &server.User{Username: u.Name, Password: passwords[u.Name], Permissions: u.Perms.Server()})
	}
	return out
}
