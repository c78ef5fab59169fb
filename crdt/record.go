package crdt

import "strings"

// Record is a record of one of three kinds: a user's like of an item
// (*LikeRecord), an idempotency key of a counter (*KeyedRecord) or of a
// budget spend (*Spend). The kinds are one lattice, a last-writer-wins
// register with per-replica contributions, and differ in what the
// contributions must add up to and who fixes them. Code that handles one
// kind takes its type; code that carries records of every kind (the
// writer's overlay, replication) holds a Record and switches on its type
// where the kinds differ.
type Record interface {
	// Excess is how far the contributions are from what they should add
	// up to.
	Excess() int64
	// BookedMs is when time windows book the winning action.
	BookedMs() int64
	// Empty reports whether the record holds no register and no
	// contribution.
	Empty() bool
	// Stamp is the register's HLC and origin (zero and "" without one).
	Stamp() (HLC, string)
	// Contributions is the per-replica contribution vector.
	Contributions() Vector

	isRecord()
}

// spendPrefix starts the name a spend is stored and sent under in the
// place of a keyed record's counter key. It is not an id byte, so a
// budget's spends and a counter's keyed records of the same name never
// meet.
const spendPrefix = "~"

// SpendName is the name the spends of budget key are stored and sent
// under: where a keyed record has its counter key.
func SpendName(key string) string { return spendPrefix + key }

// SpendKey is the budget key of a spend's name (SpendName); ok is false if
// name is not one.
func SpendKey(name string) (key string, ok bool) {
	key, ok = strings.CutPrefix(name, spendPrefix)
	return key, ok && key != ""
}
