"""Lasagne on Theano: the spec as Lasagne layers with a compiled Theano train
function, run in the legacy environment. Real content arrives with its issue;
until then no entry script uses this package."""
