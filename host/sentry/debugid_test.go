package sentry

import "testing"

// Known pairs of GNU build IDs (code_id) and the debug_id Sentry derives
// from them, published by Sentry's own projects.
func TestDebugIDKnownPairs(t *testing.T) {
	for _, c := range []struct{ code, debug, from string }{
		// getsentry/symbolic, symbolic-debuginfo/tests/test_objects.rs,
		// test_elf_executable and test_elf_debug (linux/crash, x86_64).
		{"f1c3bcc0279865fe3058404b2831d9e64135386c", "c0bcc3f1-9827-fe65-3058-404b2831d9e6", "symbolic test_objects.rs"},
		// getsentry/sentry-native, tests/fixtures/README.md: what
		// `sentry-cli difutil check` prints for with-buildid.so (x86_64),
		// also asserted by tests/unit/test_modulefinder.c.
		{"1c304742f114215453a8a777f6cdb3a2b8505e11", "4247301c-14f1-5421-53a8-a777f6cdb3a2", "sentry-native with-buildid.so"},
		// getsentry/sentry-native, tests/fixtures/README.md and
		// test_modulefinder.c: sentry_example, an x86 Android build.
		{"b4c24a6cc995c17fb18a65184a65863cfc01c673", "6c4ac2b4-95c9-7fc1-b18a-65184a65863c", "sentry-native sentry_example"},
	} {
		got, err := DebugID(c.code)
		if err != nil {
			t.Fatalf("%s: %v", c.from, err)
		}
		if got != c.debug {
			t.Errorf("%s: DebugID(%s) = %s, want %s", c.from, c.code, got, c.debug)
		}
	}
}

// The rule's edges, from its statement in Sentry's docs ("Debug
// Identifiers": the first 16 bytes of the build ID as a little-endian
// GUID, zero-padded when shorter).
func TestDebugIDRule(t *testing.T) {
	for _, c := range []struct{ code, debug string }{
		// 16 bytes (--build-id=uuid, md5): all of it.
		{"00112233445566778899aabbccddeeff", "33221100-5544-7766-8899-aabbccddeeff"},
		// 8 bytes (--build-id=fast, Go's truncated hashes): zero-padded.
		{"0102030405060708", "04030201-0605-0807-0000-000000000000"},
		// 3 bytes: padding inside the first group, then swapped.
		{"abcdef", "00efcdab-0000-0000-0000-000000000000"},
		// Upper case is the same ID.
		{"F1C3BCC0279865FE3058404B2831D9E64135386C", "c0bcc3f1-9827-fe65-3058-404b2831d9e6"},
	} {
		got, err := DebugID(c.code)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.debug {
			t.Errorf("DebugID(%s) = %s, want %s", c.code, got, c.debug)
		}
	}
	for _, bad := range []string{"", "xyz", "abc"} {
		if _, err := DebugID(bad); err == nil {
			t.Errorf("DebugID(%q): no error", bad)
		}
	}
}
