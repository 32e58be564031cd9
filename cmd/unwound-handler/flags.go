package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// flagSet parses options the way the standard flag package does (-x and
// --x, -x=v and -x v, bool flags without a value, "--" and the first
// non-flag ending the options, -h and -help), with the same messages and
// help text, for the three kinds of option the handler has. The flag
// package itself would grow the board binary (reflection for default
// values, every Value type; docs/design.md, "Footprint"). flags_test.go checks both agree.
type flagSet struct {
	name  string
	out   io.Writer
	usage func() // nil: "Usage of <name>:" and the defaults
	opts  []*option
	args  []string
}

type option struct {
	name, usage string
	str         *string
	boolean     *bool
	num         *int
	def         string // the default, printed as flag does
}

// errHelp is flag.ErrHelp's counterpart: -h or -help was asked for.
var errHelp = errors.New("flag: help requested")

func newFlagSet(name string, out io.Writer) *flagSet { return &flagSet{name: name, out: out} }

func (f *flagSet) String(name, value, usage string) *string {
	p := &value
	f.opts = append(f.opts, &option{name: name, usage: usage, str: p, def: value})
	return p
}

func (f *flagSet) Bool(name string, value bool, usage string) *bool {
	p := &value
	f.opts = append(f.opts, &option{name: name, usage: usage, boolean: p, def: strconv.FormatBool(value)})
	return p
}

func (f *flagSet) IntVar(p *int, name string, value int, usage string) {
	*p = value
	f.opts = append(f.opts, &option{name: name, usage: usage, num: p, def: strconv.Itoa(value)})
}

func (f *flagSet) Args() []string { return f.args }
func (f *flagSet) NArg() int      { return len(f.args) }

func (f *flagSet) Arg(i int) string {
	if i < 0 || i >= len(f.args) {
		return ""
	}
	return f.args[i]
}

func (f *flagSet) lookup(name string) *option {
	for _, o := range f.opts {
		if o.name == name {
			return o
		}
	}
	return nil
}

func (f *flagSet) showUsage() {
	if f.usage != nil {
		f.usage()
		return
	}
	fmt.Fprintf(f.out, "Usage of %s:\n", f.name)
	f.PrintDefaults()
}

func (f *flagSet) failf(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	fmt.Fprintln(f.out, err)
	f.showUsage()
	return err
}

// Parse parses args; the rest are Args.
func (f *flagSet) Parse(args []string) error {
	f.args = args
	for len(f.args) > 0 {
		s := f.args[0]
		if len(s) < 2 || s[0] != '-' {
			return nil
		}
		name := s[1:]
		if s[1] == '-' {
			if len(s) == 2 { // "--" ends the options
				f.args = f.args[1:]
				return nil
			}
			name = s[2:]
		}
		if len(name) == 0 || name[0] == '-' || name[0] == '=' {
			return f.failf("bad flag syntax: %s", s)
		}
		f.args = f.args[1:]
		value, hasValue := "", false
		if i := strings.IndexByte(name[1:], '='); i >= 0 {
			name, value, hasValue = name[:i+1], name[i+2:], true
		}
		o := f.lookup(name)
		if o == nil {
			if name == "help" || name == "h" {
				f.showUsage()
				return errHelp
			}
			return f.failf("flag provided but not defined: -%s", name)
		}
		if o.boolean != nil {
			if !hasValue {
				*o.boolean = true
				continue
			}
			v, err := strconv.ParseBool(value)
			if err != nil {
				return f.failf("invalid boolean value %q for -%s: parse error", value, name)
			}
			*o.boolean = v
			continue
		}
		if !hasValue && len(f.args) > 0 {
			value, f.args, hasValue = f.args[0], f.args[1:], true
		}
		if !hasValue {
			return f.failf("flag needs an argument: -%s", name)
		}
		if o.str != nil {
			*o.str = value
			continue
		}
		v, err := strconv.ParseInt(value, 0, strconv.IntSize)
		if err != nil {
			why := "parse error"
			if errors.Is(err, strconv.ErrRange) {
				why = "value out of range"
			}
			return f.failf("invalid value %q for flag -%s: %s", value, name, why)
		}
		*o.num = int(v)
	}
	return nil
}

// PrintDefaults prints the options sorted by name, as flag does: a
// `quoted` word of the usage names the value; a default other than the
// type's zero value follows the usage.
func (f *flagSet) PrintDefaults() {
	opts := append([]*option(nil), f.opts...)
	sort.Slice(opts, func(i, j int) bool { return opts[i].name < opts[j].name })
	for _, o := range opts {
		var b strings.Builder
		b.WriteString("  -" + o.name)
		name, usage := o.unquoteUsage()
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 {
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch {
		case o.str != nil && o.def != "":
			b.WriteString(" (default " + strconv.Quote(o.def) + ")")
		case o.boolean != nil && o.def != "false", o.num != nil && o.def != "0":
			b.WriteString(" (default " + o.def + ")")
		}
		fmt.Fprint(f.out, b.String(), "\n")
	}
}

func (o *option) unquoteUsage() (name, usage string) {
	usage = o.usage
	if i := strings.IndexByte(usage, '`'); i >= 0 {
		if j := strings.IndexByte(usage[i+1:], '`'); j >= 0 {
			j += i + 1
			return usage[i+1 : j], usage[:i] + usage[i+1:j] + usage[j+1:]
		}
	}
	switch {
	case o.boolean != nil:
		return "", usage
	case o.num != nil:
		return "int", usage
	}
	return "string", usage
}
