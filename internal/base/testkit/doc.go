// Package testkit holds shared test helpers: what several packages' tests
// need alike, so that each need not grow its own copy.
package testkit
