// Package milestone fires "the Nth like" exactly once across regions: it
// claims milestone numbers with create-only KV writes (Claimer), publishes
// the winners on a JetStream stream that stores each once, and keeps every
// region's view of that stream for serving (Feed). Which numbers are
// milestones is a Rule.
package milestone
