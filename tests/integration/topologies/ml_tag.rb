# A bolt in Ruby on Storm's own adapter (storm.rb, copied beside this file by the shell
# component): forwards each id anchored to its input and acks it, except that it fails each id
# ending in 7 the first time it sees it, so that the spout replays it
# (tests/integration/test_multilang.py).
require "./storm"

class TagBolt < Storm::Bolt
  def prepare(conf, context)
    @failed_once = {}
    logInfo("ruby bolt ready, task #{context['taskid']}")
  end

  def process(tup)
    id = tup.values[0]
    if id % 10 == 7 && !@failed_once.key?(id)
      @failed_once[id] = true
      fail(tup)
      return
    end
    emit([id], anchor: tup)
    ack(tup)
  end
end

TagBolt.new.run
