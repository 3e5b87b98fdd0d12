//go:build race

package resources

const raceEnabled = true
