// The live tail: appends each entry the server streams (Server-Sent Events) to
// the table. The browser resumes a broken stream by itself, sending the last
// event's id (the entry's sequence); if the stream is refused outright, this
// reopens it after the last sequence shown.
(function () {
  "use strict";
  var rows = document.getElementById("tail-rows");
  var status = document.getElementById("tail-status");
  if (!rows || !window.EventSource) {
    return;
  }
  var base = rows.getAttribute("data-events");
  var last = rows.getAttribute("data-after");
  var kept = 1000;
  var source = null;

  function say(text) {
    status.textContent = text;
  }

  function address() {
    return base.replace(/([?&])after=\d+/, "$1after=" + last);
  }

  function open() {
    source = new EventSource(address());
    source.onopen = function () {
      say("following after sequence " + last);
    };
    source.addEventListener("entry", function (event) {
      rows.insertAdjacentHTML("beforeend", event.data);
      last = event.lastEventId || last;
      while (rows.rows.length > kept) {
        rows.deleteRow(0);
      }
      say("following: last sequence " + last);
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) {
        say("the stream was refused; trying again");
        setTimeout(open, 2000);
      } else {
        say("reconnecting after sequence " + last);
      }
    };
  }

  document.getElementById("tail-noscript-note").hidden = true;
  open();
})();
