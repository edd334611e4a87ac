// A bolt in JavaScript on Storm's own adapter (storm.js, copied beside this file by the shell
// component): forwards each id, anchored to its input, and acks (tests/integration/test_multilang.py)
var storm = require('./storm');
var BasicBolt = storm.BasicBolt;

function TagBolt() {
    BasicBolt.call(this);
}
TagBolt.prototype = Object.create(BasicBolt.prototype);
TagBolt.prototype.constructor = TagBolt;

TagBolt.prototype.initialize = function(conf, context, done) {
    this.logInfo('tag bolt ready, task', context['taskid'], 'of', context['componentid']);
    done();
};

TagBolt.prototype.process = function(tup, done) {
    this.emit({tuple: [tup.values[0]], anchorTupleId: tup.id}, function(taskIds) {});
    done();
};

new TagBolt().run();
