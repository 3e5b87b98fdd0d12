//go:build !race

package otlp

const raceEnabled = false
