package main

// RFC 8785 canonical JSON of a value decoded by encoding/json with UseNumber, written from
// section 4 of schemas/events/README.md: members sorted by UTF-16 code units, only the escapes
// JSON requires (lowercase hex), integers within +/-(2^53 - 1) and nothing else numeric.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

const maxSafe = 1<<53 - 1

func canonical(value any) ([]byte, error) {
	var out bytes.Buffer
	if err := writeCanonical(&out, value, 1); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func writeCanonical(out *bytes.Buffer, value any, depth int) error {
	switch v := value.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case string:
		writeString(out, v)
	case json.Number:
		text := v.String()
		if strings.ContainsAny(text, ".eE") {
			return fmt.Errorf("numbers must be integers, found %s", text)
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n > maxSafe || n < -maxSafe {
			return fmt.Errorf("integer %s is out of range", text)
		}
		out.WriteString(strconv.FormatInt(n, 10))
	case []any:
		if depth > 64 {
			return fmt.Errorf("nested more than 64 levels deep")
		}
		out.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeCanonical(out, item, depth+1); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		if depth > 64 {
			return fmt.Errorf("nested more than 64 levels deep")
		}
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Slice(keys, func(i, j int) bool { return utf16Less(keys[i], keys[j]) })
		out.WriteByte('{')
		for i, key := range keys {
			if i > 0 {
				out.WriteByte(',')
			}
			writeString(out, key)
			out.WriteByte(':')
			if err := writeCanonical(out, v[key], depth+1); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	default:
		return fmt.Errorf("%T is not a JSON value", value)
	}
	return nil
}

func utf16Less(a, b string) bool {
	x, y := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return len(x) < len(y)
}

func writeString(out *bytes.Buffer, s string) {
	out.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\t':
			out.WriteString(`\t`)
		case '\n':
			out.WriteString(`\n`)
		case '\f':
			out.WriteString(`\f`)
		case '\r':
			out.WriteString(`\r`)
		default:
			if r < 0x20 {
				fmt.Fprintf(out, `\u%04x`, r)
			} else {
				out.WriteRune(r)
			}
		}
	}
	out.WriteByte('"')
}
