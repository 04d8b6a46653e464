package supervisor

import "testing"

func TestPipeErrors(t *testing.T) {
	if err := pipeError(""); err != nil {
		t.Errorf(`pipeError("") = %v, want nil`, err)
	}
	if err := pipeError("model failed to load"); err == nil || err.Error() != "model failed to load" {
		t.Errorf("pipeError kept %v, want the text", err)
	}
	if errs := pipeErrors(nil); errs != nil {
		t.Errorf("pipeErrors(nil) = %v, want nil: no item errors at all", errs)
	}
	errs := pipeErrors([]string{"", "bad shape"})
	if len(errs) != 2 || errs[0] != nil || errs[1] == nil || errs[1].Error() != "bad shape" {
		t.Errorf("pipeErrors = %v, want [nil, bad shape]", errs)
	}
}
