//go:build race

package job

const raceEnabled = true
