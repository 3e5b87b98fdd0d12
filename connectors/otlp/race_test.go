//go:build race

package otlp

const raceEnabled = true
