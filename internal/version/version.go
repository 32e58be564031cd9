// Package version holds the version string the build stamps into every
// binary (-ldflags -X).
package version

// Version is set by the build (-ldflags -X); "dev" in tests.
var Version = "dev"
