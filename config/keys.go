package config

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Key describes one configuration key. The list comes from the struct tags of
// [Config], so the environment bindings, the flags, [Reloadable] and
// docs/CONFIG.md can never disagree with the struct.
type Key struct {
	// Name is the dotted key. Keys inside a list of tables carry "[]":
	// "wan.planes[].local".
	Name string
	// Env is the environment variable that overrides the key, or "" for keys
	// that only a file can set (lists of tables and what is inside them).
	Env string
	// Type is a human name for the value: string, integer, boolean,
	// duration, list of strings, list of tables.
	Type string
	// Default is the default value formatted as it would be written in a
	// file, or "" for none.
	Default string
	// Reloadable says whether the key may change without a restart.
	Reloadable bool
	// Doc is a one-line description.
	Doc string
}

// leaf is a key found by walking the Config type.
type leaf struct {
	Key
	index  []int // field index path from Config; nil inside lists
	typ    reflect.Type
	inList bool
}

// isTableList reports whether t is a list of tables (a slice of structs).
func isTableList(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct
}

// walk calls fn for every key of struct type t, depth first in field order.
// A list of tables is itself a key; its element keys follow it with
// inList set.
func walk(t reflect.Type, prefix string, index []int, live, inList bool, fn func(leaf)) {
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Tag.Get("mapstructure")
		if name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fieldLive := live || f.Tag.Get("reload") == "live"
		var idx []int
		if !inList {
			idx = append(append([]int(nil), index...), i)
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			walk(f.Type, key, idx, fieldLive, inList, fn)
			continue
		}
		l := leaf{
			Key: Key{
				Name:       key,
				Type:       typeName(f.Type),
				Reloadable: fieldLive,
				Doc:        f.Tag.Get("doc"),
			},
			index:  idx,
			typ:    f.Type,
			inList: inList,
		}
		if !inList && !isTableList(f.Type) {
			l.Env = envName(key)
		}
		fn(l)
		if isTableList(f.Type) {
			walk(f.Type.Elem(), key+"[]", nil, fieldLive, true, fn)
		}
	}
}

// leaves returns every key of Config, computed once. Callers must not modify
// the slice.
var leaves = sync.OnceValue(func() []leaf {
	var out []leaf
	walk(reflect.TypeFor[Config](), "", nil, false, false, func(l leaf) { out = append(out, l) })
	return out
})

// Keys lists every configuration key with its type, default, environment
// variable and whether it can be reloaded, in the order of the Config struct.
func Keys() []Key {
	def := reflect.ValueOf(Default()).Elem()
	var out []Key
	for _, l := range leaves() {
		k := l.Key
		if !l.inList {
			k.Default = formatValue(def.FieldByIndex(l.index))
		}
		out = append(out, k)
	}
	return out
}

// envName is the environment variable for a dotted key.
func envName(key string) string {
	return envPrefix + "_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		return "duration"
	case isTableList(t):
		return "list of tables"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "list of strings"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		return "integer"
	}
	return t.String()
}

// formatValue renders a default the way it would be written in a file.
func formatValue(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		if v.Int() == 0 {
			return "" // unset
		}
		return fmtDur(time.Duration(v.Int()))
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return ""
		}
		return fmt.Sprintf("%q", v.String())
	case v.Kind() == reflect.Slice:
		if v.Len() == 0 {
			return ""
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = formatTable(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

func formatTable(v reflect.Value) string {
	if v.Kind() != reflect.Struct {
		return formatValue(v)
	}
	var parts []string
	for i := range v.NumField() {
		parts = append(parts, v.Type().Field(i).Tag.Get("mapstructure")+": "+formatValue(v.Field(i)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// toSetting converts a default value into what viper stores for it: tables
// become maps keyed by their mapstructure names, so a default list of tables
// decodes exactly like one read from a file.
func toSetting(v reflect.Value) any {
	switch {
	case v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[time.Duration]():
		m := make(map[string]any, v.NumField())
		for i := range v.NumField() {
			if name := v.Type().Field(i).Tag.Get("mapstructure"); name != "" && name != "-" {
				m[name] = toSetting(v.Field(i))
			}
		}
		return m
	case isTableList(v.Type()):
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = toSetting(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
