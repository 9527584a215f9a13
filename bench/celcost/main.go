// bench/celcost: what gpugate's native objects cost kube-apiserver per pod, measured with the apiserver's own
// admission evaluators (k8s.io/apiserver v0.36.3, the version the end-to-end suite runs), without a server.
//
// For the MutatingAdmissionPolicy it runs what policy/mutating/dispatcher.go does for one policy (the match
// conditions, then the JSON patch: patch/json_patch.go encodes the pod, applies the patch and decodes it; or an
// apply configuration, patch/smd.go, merged with the Pod's structured-merge-diff schema), and for
// each ValidatingAdmissionPolicy what policy/validating/validator.go Validate does (match conditions, validations,
// messageExpressions, auditAnnotations: an activation each, cel/activation.go, each converting the pod), on the
// pod as the mutating policy left it. Per object it prints the Go heap allocations and the process CPU per pod,
// GC included (a sustained loop, as in the apiserver), as JSON; with -compare it evaluates every case under both
// compilations and prints each case whose formed pod or decisions differ.
//
// Usage: celcost -cases CASES.json [-compare OTHER.yaml] [-rounds N] OBJECTS.yaml
// bench/native_cost.py builds it, writes the inputs and prints the table.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/pprof"
	"sort"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

type mutating struct {
	name     string
	reinvoke bool // reinvocationPolicy IfNeeded
	compiler *plugincel.CompositedCompiler
	matcher  matchconditions.Matcher
	patchers []patch.Patcher
}

type validator struct {
	name string
	v    validating.Validator
}

// hook: one webhook of a webhook configuration, of which only the match conditions run in the apiserver when they
// skip the call (webhook/generic/webhook.go ShouldCallHook).
type hook struct {
	name     string
	matcher  matchconditions.Matcher
	mutating bool
	// Whether its rules route a pod's creation (the other webhooks of a configuration never see this pod), and its
	// objectSelector: a pod it does not select is skipped before any match condition (ShouldCallHook).
	routesPodCreate bool
	selector        labels.Selector
}

type objects struct {
	mutating   []mutating
	validating []validator
	hooks      []hook
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "celcost:", err)
		os.Exit(1)
	}
}

func load(path string) objects {
	f, err := os.Open(path)
	must(err)
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out objects
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if raw == nil {
			continue
		}
		b, err := json.Marshal(raw)
		must(err)
		switch raw["kind"] {
		case "MutatingAdmissionPolicy":
			var p admissionregistrationv1.MutatingAdmissionPolicy
			must(json.Unmarshal(b, &p))
			out.mutating = append(out.mutating, compileMutating(&p))
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			must(json.Unmarshal(b, &p))
			out.validating = append(out.validating, validator{p.Name, compileValidating(&p)})
		case "MutatingWebhookConfiguration":
			var c admissionregistrationv1.MutatingWebhookConfiguration
			must(json.Unmarshal(b, &c))
			for _, w := range c.Webhooks {
				out.hooks = append(out.hooks, compileHook(w.Name, w.MatchConditions, w.FailurePolicy, "mutating", w.Rules, w.ObjectSelector))
			}
		case "ValidatingWebhookConfiguration":
			var c admissionregistrationv1.ValidatingWebhookConfiguration
			must(json.Unmarshal(b, &c))
			for _, w := range c.Webhooks {
				out.hooks = append(out.hooks, compileHook(w.Name, w.MatchConditions, w.FailurePolicy, "validating", w.Rules, w.ObjectSelector))
			}
		}
	}
	return out
}

func variables(in []admissionregistrationv1.Variable) []plugincel.NamedExpressionAccessor {
	res := make([]plugincel.NamedExpressionAccessor, len(in))
	for i, v := range in {
		res[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	return res
}

func conditions(in []admissionregistrationv1.MatchCondition) []plugincel.ExpressionAccessor {
	res := make([]plugincel.ExpressionAccessor, len(in))
	for i := range in {
		res[i] = (*matchconditions.MatchCondition)(&in[i])
	}
	return res
}

func newCompiler(name string, vars []admissionregistrationv1.Variable, opts plugincel.OptionalVariableDeclarations) *plugincel.CompositedCompiler {
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	must(err)
	for _, v := range variables(vars) {
		if r := compiler.CompileAndStoreVariable(v, opts, environment.StoredExpressions); r.Error != nil {
			must(fmt.Errorf("%s: variable %s: %v", name, v.GetName(), r.Error))
		}
	}
	return compiler
}

func compileMutating(p *admissionregistrationv1.MutatingAdmissionPolicy) mutating {
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler := newCompiler(p.Name, p.Spec.Variables, opts)
	m := mutating{name: p.Name, compiler: compiler}
	m.reinvoke = p.Spec.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy
	if len(p.Spec.MatchConditions) > 0 {
		m.matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions(p.Spec.MatchConditions), opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "mutate", p.Name)
	}
	popts := opts
	popts.HasPatchTypes = true
	for _, mutation := range p.Spec.Mutations {
		// As policy/mutating/compilation.go compiles each: a JSON patch, or an apply configuration merged with
		// structured-merge-diff (bench/cel-equivalent.yaml's; gpugate's objects use JSON patches only, since an apply
		// configuration may not change the atomic tolerations and nodeSelector, patch/smd.go validatePatch).
		var accessor plugincel.ExpressionAccessor
		switch {
		case mutation.JSONPatch != nil:
			accessor = &patch.JSONPatchCondition{Expression: mutation.JSONPatch.Expression}
		case mutation.ApplyConfiguration != nil:
			accessor = &patch.ApplyConfigurationCondition{Expression: mutation.ApplyConfiguration.Expression}
		default:
			must(fmt.Errorf("%s: a mutation with neither a JSON patch nor an apply configuration", p.Name))
		}
		ev := compiler.CompileMutatingEvaluator(accessor, popts, environment.StoredExpressions)
		for _, e := range ev.CompilationErrors() {
			must(fmt.Errorf("%s: %v", p.Name, e))
		}
		if mutation.JSONPatch != nil {
			m.patchers = append(m.patchers, patch.NewJSONPatcher(ev))
		} else {
			m.patchers = append(m.patchers, patch.NewApplyConfigurationPatcher(ev))
		}
	}
	return m
}

// typeConverter: the Pod's structured-merge-diff schema an apply configuration is merged with, from the same
// generated OpenAPI models as the apiserver's (client-go's applyconfigurations).
var typeConverter = applyconfigurations.NewTypeConverter(scheme.Scheme)

func compileHook(name string, in []admissionregistrationv1.MatchCondition, f *admissionregistrationv1.FailurePolicyType, kind string, rules []admissionregistrationv1.RuleWithOperations, objectSelector *metav1.LabelSelector) hook {
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	compiler := newCompiler(name, nil, opts)
	routes := false
	for _, r := range rules {
		creates := false
		for _, op := range r.Operations {
			creates = creates || op == admissionregistrationv1.Create || op == admissionregistrationv1.OperationAll
		}
		for _, res := range r.Resources {
			routes = routes || (creates && (res == "pods" || res == "*"))
		}
	}
	selector := labels.Everything()
	if objectSelector != nil {
		var err error
		selector, err = metav1.LabelSelectorAsSelector(objectSelector)
		must(err)
	}
	return hook{name, matchconditions.NewMatcher(compiler.CompileCondition(conditions(in), opts, environment.StoredExpressions), f, "webhook", kind, name), kind == "mutating", routes, selector}
}

func compileValidating(p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	messageOpts := plugincel.OptionalVariableDeclarations{HasAuthorizer: false}
	compiler := newCompiler(p.Name, p.Spec.Variables, opts)
	var matcher matchconditions.Matcher
	if len(p.Spec.MatchConditions) > 0 {
		matcher = matchconditions.NewMatcher(compiler.CompileCondition(conditions(p.Spec.MatchConditions), opts, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name)
	}
	checks := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages := make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		checks[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	audit := make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		audit[i] = &validating.AuditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validating.NewValidator(
		compiler.CompileCondition(checks, opts, environment.StoredExpressions),
		matcher,
		compiler.CompileCondition(audit, opts, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageOpts, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

var gvk = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
var gvr = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func attrs(pod *corev1.Pod) *admission.VersionedAttributes {
	a := admission.NewAttributesRecord(pod, nil, gvk, pod.Namespace, pod.Name, gvr, "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "admin"})
	return &admission.VersionedAttributes{Attributes: a, VersionedObject: pod, VersionedKind: gvk}
}

// mutate runs one mutating policy on pod and returns the pod it leaves.
func (m mutating) mutate(pod *corev1.Pod, ns *corev1.Namespace) (*corev1.Pod, error) {
	out, _, err := m.invoke(pod, ns, true)
	return out, err
}

// again is the policy on the reinvocation pass: the apiserver evaluates its match conditions, and applies it again
// only when it is IfNeeded and was applied on the first pass (policy/mutating/dispatcher.go dispatchInvocations).
func (m mutating) again(pod *corev1.Pod, ns *corev1.Namespace, applied bool) (*corev1.Pod, error) {
	out, _, err := m.invoke(pod, ns, m.reinvoke && applied)
	return out, err
}

// invoke evaluates the match conditions and, when they match and apply is set, the mutations; matched says whether
// the mutations ran.
func (m mutating) invoke(pod *corev1.Pod, ns *corev1.Namespace, apply bool) (*corev1.Pod, bool, error) {
	ctx := m.compiler.CreateContext(context.Background())
	va := attrs(pod)
	if m.matcher != nil {
		r := m.matcher.Match(ctx, va, nil, nil)
		if r.Error != nil {
			return nil, false, r.Error
		}
		if !r.Matches {
			return pod, false, nil
		}
	}
	if !apply {
		return pod, false, nil
	}
	for _, p := range m.patchers {
		obj, err := p.Patch(ctx, patch.Request{MatchedResource: gvr, VersionedAttributes: va, ObjectInterfaces: admission.NewObjectInterfacesFromScheme(scheme.Scheme), Namespace: ns, TypeConverter: typeConverter}, celconfig.RuntimeCELCostBudget)
		if err != nil {
			return nil, false, err
		}
		// As dispatcher.go dispatchOne: the result converted to the typed version (a copy for a JSON patch's, the
		// typed object for an apply configuration's unstructured one) and defaulted. client-go's scheme holds no
		// defaulting functions (the Pod's are kube-apiserver's own, k8s.io/kubernetes pkg/apis/core/v1), so the
		// apiserver's defaulting of the patched pod is not counted here.
		obj, err = scheme.Scheme.ConvertToVersion(obj, gvk.GroupVersion())
		if err != nil {
			return nil, false, err
		}
		scheme.Scheme.Default(obj)
		pod = obj.(*corev1.Pod)
		va = attrs(pod)
	}
	return pod, true, nil
}

// formPod runs the mutating policies as the apiserver's mutating chain does: in order, then, when they changed the
// pod, once more (the reinvocation pass), with sidecar standing for a later mutating webhook between the two (a
// sidecar injector's: one container without GPUs added).
func formPod(o objects, pod *corev1.Pod, ns *corev1.Namespace, sidecar bool) (*corev1.Pod, error) {
	formed := pod
	applied := make([]bool, len(o.mutating))
	for i, m := range o.mutating {
		next, ok, err := m.invoke(formed, ns, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", m.name, err)
		}
		formed, applied[i] = next, ok
	}
	if sidecar {
		formed = formed.DeepCopy()
		formed.Spec.Containers = append(formed.Spec.Containers, corev1.Container{Name: "proxy", Image: "envoy"})
	}
	if apiequality.Semantic.DeepEqual(pod, formed) {
		return formed, nil
	}
	for i, m := range o.mutating {
		next, err := m.again(formed, ns, applied[i])
		if err != nil {
			return nil, fmt.Errorf("%s (reinvocation pass): %v", m.name, err)
		}
		formed = next
	}
	return formed, nil
}

func (v validator) decisions(pod *corev1.Pod, ns *corev1.Namespace) []string {
	var out []string
	r := v.v.Validate(context.Background(), gvr, attrs(pod), nil, ns, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range r.Decisions {
		if d.Action != validating.ActionAdmit {
			out = append(out, fmt.Sprintf("%s: %s %s: %s", v.name, d.Action, d.Evaluation, d.Message))
		}
	}
	return out
}

type outcome struct {
	Formed    string   `json:"formed"`
	Decisions []string `json:"decisions"`
}

// run forms the pod (every mutating policy, in order) and validates the result with every validating policy.
func run(o objects, pod *corev1.Pod, ns *corev1.Namespace, sidecar bool) outcome {
	formed, err := formPod(o, pod, ns, sidecar)
	if err != nil {
		return outcome{Formed: err.Error()}
	}
	if formed.Name == "" && formed.GenerateName != "" { // the apiserver names the pod before validating it
		formed = formed.DeepCopy()
		formed.Name = formed.GenerateName + "x1y2z"
	}
	b, err := json.Marshal(formed)
	must(err)
	out := outcome{Formed: string(b)}
	for _, v := range o.validating {
		out.Decisions = append(out.Decisions, v.decisions(formed, ns)...)
	}
	sort.Strings(out.Decisions)
	return out
}

type testCase struct {
	Name      string            `json:"name"`
	NsLabels  map[string]string `json:"nsLabels"`
	Namespace string            `json:"namespace"`
	Pod       corev1.Pod        `json:"pod"`
	// Sidecar: a later mutating webhook adds a container without GPUs between the two passes of the chain.
	Sidecar bool `json:"sidecar"`
	// Tamper: the pod formed by the objects measured, changed so and sent again (a forged claim).
	Tamper *struct {
		Labels          map[string]*string      `json:"labels"`
		Annotations     map[string]*string      `json:"annotations"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"tamper"`
}

func namespaceOf(c testCase) *corev1.Namespace {
	name := c.Namespace
	if name == "" {
		name = "bench"
	}
	labels := map[string]string{"kubernetes.io/metadata.name": name}
	for k, v := range c.NsLabels {
		labels[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func prepare(c testCase, o objects, ns *corev1.Namespace) *corev1.Pod {
	pod := c.Pod.DeepCopy()
	pod.Namespace = ns.Name
	if c.Tamper == nil {
		return pod
	}
	var formed corev1.Pod
	if err := json.Unmarshal([]byte(run(o, pod, ns, false).Formed), &formed); err != nil {
		must(fmt.Errorf("case %s: the pod could not be formed to tamper with", c.Name))
	}
	set := func(m map[string]string, with map[string]*string) map[string]string {
		if m == nil {
			m = map[string]string{}
		}
		for k, v := range with {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
		return m
	}
	formed.Labels = set(formed.Labels, c.Tamper.Labels)
	formed.Annotations = set(formed.Annotations, c.Tamper.Annotations)
	if c.Tamper.OwnerReferences != nil {
		formed.OwnerReferences = c.Tamper.OwnerReferences
	}
	return &formed
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	must(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cost: Go heap allocations, the bytes they take, and process CPU (GC included) per call of f, over n calls after a
// warm-up.
func cost(f func(), n int) (uint64, uint64, float64) {
	f()
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	t := cpuNow()
	for i := 0; i < n; i++ {
		f()
	}
	us := float64(cpuNow()-t) / float64(n) / 1e3
	runtime.ReadMemStats(&b)
	return (b.Mallocs - a.Mallocs) / uint64(n), (b.TotalAlloc - a.TotalAlloc) / uint64(n), us
}

type objectCost struct {
	Object      string    `json:"object"`
	Allocations uint64    `json:"allocations"`
	Bytes       uint64    `json:"bytes"`  // what the allocations take: the garbage collector's work grows with it
	CPU         []float64 `json:"cpu_us"` // one figure per round
}

// measure: per object, what one pod costs it (the mutating policies on the pod as sent, the validating ones on
// the pod as the mutating policies left it), over rounds of n calls each.
func measure(o objects, c testCase, rounds, n int) []objectCost {
	ns := namespaceOf(c)
	pod := c.Pod.DeepCopy()
	pod.Namespace = ns.Name
	var out []objectCost
	formed := pod
	for _, m := range o.mutating {
		from := formed
		f := func() {
			if _, err := m.mutate(from.DeepCopy(), ns); err != nil {
				must(err)
			}
		}
		oc := objectCost{Object: m.name}
		for r := 0; r < rounds; r++ {
			a, b, us := cost(f, n)
			oc.Allocations, oc.Bytes, oc.CPU = a, b, append(oc.CPU, us)
		}
		out = append(out, oc)
		next, err := m.mutate(from.DeepCopy(), ns)
		must(err)
		formed = next
	}
	// The reinvocation pass, which the pod's change always brings: each mutating policy's match conditions again,
	// and an IfNeeded policy applied again when they match.
	for _, m := range o.mutating {
		f := func() {
			if _, err := m.again(formed.DeepCopy(), ns, true); err != nil {
				must(err)
			}
		}
		oc := objectCost{Object: m.name + " (reinvocation pass)"}
		for r := 0; r < rounds; r++ {
			a, b, us := cost(f, n)
			oc.Allocations, oc.Bytes, oc.CPU = a, b, append(oc.CPU, us)
		}
		out = append(out, oc)
	}
	for _, v := range o.validating {
		f := func() { v.decisions(formed.DeepCopy(), ns) }
		oc := objectCost{Object: v.name}
		for r := 0; r < rounds; r++ {
			a, b, us := cost(f, n)
			oc.Allocations, oc.Bytes, oc.CPU = a, b, append(oc.CPU, us)
		}
		out = append(out, oc)
	}
	for _, h := range o.hooks {
		if !h.routesPodCreate {
			continue
		}
		f := func() {
			if r := h.matcher.Match(context.Background(), attrs(formed.DeepCopy()), nil, nil); r.Error != nil {
				must(fmt.Errorf("%s: %v", h.name, r.Error))
			}
		}
		if !h.selector.Matches(labels.Set(formed.Labels)) {
			// Skipped by its objectSelector (webhook/predicates/object/matcher.go: the labels of the object, no
			// conversion, no CEL); measured as that test.
			f = func() {
				pod := formed.DeepCopy()
				attrs(pod)
				if h.selector.Matches(labels.Set(pod.Labels)) {
					must(fmt.Errorf("%s: the objectSelector changed its mind", h.name))
				}
			}
		}
		// A mutating webhook's conditions are evaluated again on the reinvocation pass, before the apiserver asks
		// whether to reinvoke it (webhook/mutating/dispatcher.go: ShouldCallHook, then ShouldReinvokeWebhook).
		tested := "match conditions"
		if !h.selector.Matches(labels.Set(formed.Labels)) {
			tested = "objectSelector: not sent"
		}
		passes := []string{" (" + tested + ")"}
		if h.mutating {
			passes = append(passes, " ("+tested+", reinvocation pass)")
		}
		for _, pass := range passes {
			oc := objectCost{Object: h.name + pass}
			for r := 0; r < rounds; r++ {
				a, b, us := cost(f, n)
				oc.Allocations, oc.Bytes, oc.CPU = a, b, append(oc.CPU, us)
			}
			out = append(out, oc)
		}
	}
	// The copy each call starts from is not the apiserver's: measured alone, and taken off every object's figures.
	base := objectCost{Object: "(the pod's copy, subtracted)"}
	for r := 0; r < rounds; r++ {
		a, b, us := cost(func() { attrs(formed.DeepCopy()) }, n)
		base.Allocations, base.Bytes, base.CPU = a, b, append(base.CPU, us)
	}
	for i := range out {
		out[i].Allocations -= base.Allocations
		out[i].Bytes -= base.Bytes
		for r := range out[i].CPU {
			// What costs nothing but the copy comes out a hair either side of zero.
			out[i].CPU[r] = max(out[i].CPU[r]-base.CPU[r], 0)
		}
	}
	return out
}

type report struct {
	Costs   []objectCost `json:"costs"`
	Cases   int          `json:"cases"`
	Differs []string     `json:"differs,omitempty"`
}

func main() {
	casesPath := flag.String("cases", "", "JSON list of cases; the first is the pod measured")
	compare := flag.String("compare", "", "another compilation: print every case whose outcome differs")
	rounds := flag.Int("rounds", 5, "rounds of the CPU measurement")
	calls := flag.Int("calls", 400, "calls per round")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the measurement (go tool pprof) to this file")
	flag.Parse()
	if flag.NArg() != 1 || *casesPath == "" {
		fmt.Fprintln(os.Stderr, "usage: celcost -cases CASES.json [-compare OTHER.yaml] [-rounds N] OBJECTS.yaml")
		os.Exit(2)
	}
	measured := load(flag.Arg(0))
	data, err := os.ReadFile(*casesPath)
	must(err)
	var cases []testCase
	must(yaml.Unmarshal(data, &cases))
	if len(cases) == 0 {
		must(fmt.Errorf("%s: no case", *casesPath))
	}
	rep := report{Cases: len(cases)}
	if *compare != "" {
		other := load(*compare)
		for _, c := range cases {
			ns := namespaceOf(c)
			pod := prepare(c, measured, ns)
			x, y := run(measured, pod.DeepCopy(), ns, c.Sidecar), run(other, pod.DeepCopy(), ns, c.Sidecar)
			if !reflect.DeepEqual(x, y) {
				b, _ := json.Marshal(map[string]any{"case": c.Name, "measured": x, "other": y})
				rep.Differs = append(rep.Differs, string(b))
			}
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	rep.Costs = measure(measured, cases[0], *rounds, *calls)
	out, err := json.MarshalIndent(rep, "", " ")
	must(err)
	fmt.Println(string(out))
}
