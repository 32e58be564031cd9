package symbolize

import "github.com/unwound-dev/unwound/testkit/labcore"

// labCrashes turns the comparison cases into lab crashes.
func labCrashes() []labcore.Crash {
	var out []labcore.Crash
	for _, c := range cases {
		out = append(out, labcore.Crash{Variant: c.variant, Prog: progOf(c.scenario), Scenario: c.scenario})
	}
	return out
}

func progOf(scenario string) string {
	if scenario == "throw" {
		return "crashxx"
	}
	return "crash"
}
