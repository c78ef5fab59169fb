//go:build !chaos

package buildtags

// Chaos is true in a chaos build (`-tags chaos`).
const Chaos = false
