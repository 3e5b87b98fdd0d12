//go:build race

package simulator

const raceEnabled = true
