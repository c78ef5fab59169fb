// Package process holds what concerns a tallyd process as a whole rather
// than one of its commands: the tuning it gets at start (the C
// allocator's settings for Pebble's cache, made before the Go runtime
// starts a thread) and its diagnostics (the pprof server of
// --debug-listen). Process-level tuning has its home here, in one place,
// and LogTuning reports all of it.
package process
