//go:build race

package kvgraph

const raceEnabled = true
