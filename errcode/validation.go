package errcode

// FieldError is one invalid field of a request, named as the client sent
// it (its JSON name, or "params.url" for a nested one). It is what the
// `fields` of a 400 lists, whichever package found the problem.
type FieldError struct {
	Field   string `json:"field"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ValidationError lists every invalid field of a request. Kind is the
// invalid_request sentinel of the package that judged the request (the
// manager's, the browser router's), so errors.Is(err, thatSentinel) holds
// and Of gives invalid_request; the api renders Fields the same way for
// all of them.
type ValidationError struct {
	Kind   error
	Fields []FieldError
}

// errInvalid stands in for a missing Kind, so that a ValidationError is an
// invalid_request however it was built.
var errInvalid = New(InvalidRequest, "the request is invalid")

func (e *ValidationError) Error() string {
	msg := e.Unwrap().Error()
	if len(e.Fields) == 0 {
		return msg
	}
	return msg + ": " + e.Fields[0].Field + " " + e.Fields[0].Code
}

// Unwrap exposes Kind to errors.Is and Of.
func (e *ValidationError) Unwrap() error {
	if e.Kind == nil {
		return errInvalid
	}
	return e.Kind
}
