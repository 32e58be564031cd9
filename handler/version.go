package handler

// Version is set by the build (-ldflags -X); "dev" in tests.
var Version = "dev"
