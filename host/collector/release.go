package collector

import (
	"encoding/json"
	"strings"

	"github.com/unwound-dev/unwound/report"
	"github.com/unwound-dev/unwound/report/decode"
)

// Release is the report's release object: the board's /etc/os-release
// fields (docs/report-format.md), with the collector's label. Every field
// may be empty; a report without one is from release "unknown".
type Release report.Release

// Unknown is the release label of reports without a release.
const Unknown = "unknown"

// Label is how the collector names a release: the image's id and version
// when the image says them (IMAGE_ID, IMAGE_VERSION: the firmware a team
// ships), else the distribution's (ID, VERSION_ID), else BUILD_ID, else
// "unknown". "myimage 2.4.1", "poky 5.0".
func (r Release) Label() string {
	first := func(ss ...string) string {
		for _, s := range ss {
			if s != "" {
				return s
			}
		}
		return ""
	}
	var name, ver string
	switch {
	case r.ImageVersion != "":
		name, ver = first(r.ImageID, r.ID), r.ImageVersion
	case r.VersionID != "":
		name, ver = first(r.ID, r.ImageID), r.VersionID
	default:
		name, ver = first(r.ImageID, r.ID), r.BuildID
	}
	label := strings.TrimSpace(name + " " + ver)
	if label == "" {
		return Unknown
	}
	return label
}

// reportExtras are the report fields this package reads that package
// report may not define (yet): release and device.attributes.
type reportExtras struct {
	Release    Release
	Attributes map[string]string
}

// extras reads the release object and the device attributes from a
// report's JSON. Field names are matched as os-release writes them too
// (VERSION_ID), and anything malformed is ignored: they only label.
func extras(data []byte) reportExtras {
	var x reportExtras
	js, err := decode.JSON(data)
	if err != nil {
		return x
	}
	var top struct {
		Release json.RawMessage `json:"release"`
		Device  struct {
			Attributes json.RawMessage `json:"attributes"`
		} `json:"device"`
	}
	if json.Unmarshal(js, &top) != nil {
		return x
	}
	var rel map[string]any
	if json.Unmarshal(top.Release, &rel) == nil {
		get := func(k string) string {
			for key, v := range rel {
				if strings.EqualFold(key, k) {
					if s, ok := v.(string); ok {
						return clean(s)
					}
				}
			}
			return ""
		}
		x.Release = Release{ID: get("id"), VersionID: get("version_id"), ImageID: get("image_id"), ImageVersion: get("image_version"), BuildID: get("build_id")}
	}
	var attrs map[string]any
	if json.Unmarshal(top.Device.Attributes, &attrs) == nil && len(attrs) > 0 {
		x.Attributes = map[string]string{}
		for k, v := range attrs {
			if s, ok := v.(string); ok && k != "" && len(x.Attributes) < 64 {
				x.Attributes[clean(k)] = clean(s)
			}
		}
	}
	return x
}

// clean bounds a label from a board: 128 bytes, no control characters.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > 128 {
		s = strings.ToValidUTF8(s[:128], "")
	}
	return strings.TrimSpace(s)
}
