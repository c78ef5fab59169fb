package region

// Admin is the replica's face for what operators manage: event types
// (types.go), the block list (blocks.go), audits (audit.go), backups
// (backup.go), idempotency key expiry (idem.go) and shard drops (drop.go).
type Admin struct{ r *Replica }

// Admin returns the replica's admin face.
func (r *Replica) Admin() Admin { return Admin{r} }
