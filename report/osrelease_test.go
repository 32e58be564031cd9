package report

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseOSRelease(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       *Release
	}{
		{"debian", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n",
			&Release{ID: "debian", VersionID: "12"}},
		// What Yocto's os-release recipe writes with IMAGE_ID and
		// IMAGE_VERSION added to OS_RELEASE_FIELDS.
		{"yocto", "ID=poky\nNAME=\"Poky (Yocto Project Reference Distro)\"\nVERSION_ID=5.0.4\nIMAGE_ID=\"gateway-image\"\nIMAGE_VERSION=\"2.4.1\"\nBUILD_ID=\"20261120143000\"\n",
			&Release{ID: "poky", VersionID: "5.0.4", ImageID: "gateway-image", ImageVersion: "2.4.1", BuildID: "20261120143000"}},
		{"buildroot", "NAME=Buildroot\nVERSION=2024.02.7\nID=buildroot\nVERSION_ID=2024.02.7\nPRETTY_NAME=\"Buildroot 2024.02.7\"\n",
			&Release{ID: "buildroot", VersionID: "2024.02.7"}},
		{"quoting", "# comment\n  IMAGE_VERSION='2.4 \"rc\"'\r\nBUILD_ID=\"a\\\"b\\\\c\\$d\\`e\\n\"\nID=\n",
			&Release{ImageVersion: "2.4 \"rc\"", BuildID: "a\"b\\c$d`e\\n"}},
		{"none", "NAME=x\n\n=\nID\n", nil},
		{"empty", "", nil},
	} {
		got := ParseOSRelease([]byte(tc.text))
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestParseOSReleaseBounds(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes
	r := ParseOSRelease([]byte("BUILD_ID=" + long + "\n"))
	if r == nil || len(r.BuildID) > MaxReleaseValue || !utf8.ValidString(r.BuildID) || !strings.HasPrefix(long, r.BuildID) || len(r.BuildID) < MaxReleaseValue-1 {
		t.Fatalf("cut to %q (%d bytes)", r.BuildID, len(r.BuildID))
	}
	rep := sample()
	rep.Release = r
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseOSRelease(f *testing.F) {
	f.Add([]byte("ID=poky\nVERSION_ID=\"5.0\"\nIMAGE_VERSION='2.4.1'\nBUILD_ID=\"x\\\"y\"\n"))
	f.Add([]byte("ID=\"\n"))
	f.Add([]byte("IMAGE_ID=" + strings.Repeat("\xff", 100)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := ParseOSRelease(b)
		if r == nil {
			return
		}
		rep := sample()
		rep.Release = r
		if err := rep.Validate(); err != nil {
			t.Fatal(err)
		}
		if *r == (Release{}) {
			t.Fatal("an empty release is nil")
		}
	})
}
