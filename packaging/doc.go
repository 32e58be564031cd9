// Package packaging holds what installs unwound on a board and the tests
// that check it: `make install` for each init system, `make dist`, the Yocto
// layer (recipes/) and the Buildroot external tree (buildroot/). The
// corepattern command computes the core_pattern line at install time.
package packaging
